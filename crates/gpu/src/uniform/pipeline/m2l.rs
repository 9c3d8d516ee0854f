//! Phase 7 of [`UniformFmm`]'s pipeline: M2L per level over the implicit stencil.

use super::*;

impl UniformFmm {
    /// Phase 7: M2L per level over the implicit stencil, one block per target cell of the
    /// cells overlapping the own planes (level 0 skipped when every top cell is a neighbour
    /// of every other).
    pub(super) fn m2l_pass(
        &self,
        ps: &Pass,
        xp: &mut Expansions,
        tb: &Tables,
        tm: &mut UniformTimes,
    ) -> GpuResult<()> {
        let (s, g, p) = (&ps.s, &ps.g, ps.p);
        let (r_i, trt, periodic_i) = (tb.r as i32, tr_threads(p), ps.periodic_i());
        if ps.region.is_whole() {
            tm.m2l_translations = crate::uniform::m2l_count(g);
        }
        tm.k_m2l = self.event_timed(|| {
            let f = self.func(p, "u_m2l")?;
            for l in 0..=g.k {
                if l == 0 && g.m < 3 {
                    continue; // every top cell is a neighbour of every other
                }
                let (off, nl) = (g.level_offset(l) as i32, g.n_at(l) as i32);
                let top = (l == 0) as i32;
                let w = g.width(l) as f32;
                let (c0, cnt) = ps.region.level_cells(l);
                let c0_i = c0 as i32;
                let mut b = s.launch_builder(&f);
                b.arg(&xp.mult)
                    .arg(&mut xp.loc)
                    .arg(&tb.rots)
                    .arg(&tb.z_m2l)
                    .arg(&tb.toff);
                b.arg(&r_i).arg(&off).arg(&nl).arg(&top).arg(&periodic_i);
                b.arg(&w).arg(&c0_i);
                // SAFETY: u_m2l(const float2* mult, float2* loc, const float* rots, ztab,
                // const int* toff, int R, level_off, nl, top, periodic, float w, int c0): the
                // arguments in this order and of these types; one block of TR_THREADS per
                // target cell c0 .. c0 + cnt of level l (inside the level); the stencil's
                // offsets are at most R = tb.r (ensure_tables).
                unsafe { b.launch(blocks(cnt, trt)) }?;
            }
            Ok(())
        })?;
        Ok(())
    }
}
