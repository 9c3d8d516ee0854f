//! Checkpoints of several ranks (a piece per rank and a manifest) on simulated ranks
//! (`vortex_domain::ThreadComm`) and the CPU host path: a set written on R = 1..4 ranks
//! continues on another number exactly as the single file of the same state does, and the
//! state read back is the state written, bit for bit; a same-R restart is bitwise the
//! uninterrupted run; a missing, truncated, corrupt or foreign piece is refused naming it on
//! every rank; rotation removes the unnamed pieces and nothing else; a write stopped between
//! the pieces and the manifest leaves the previous set as the restart point.

use std::path::{Path, PathBuf};
use vortex_domain::{Comm, ThreadComm};
use vortex_method::checkpoint::{self, pieces, Source, MANIFEST_FILE};
use vortex_method::config::Config;
use vortex_method::parallel::{balance_by_gid, LocalState};
use vortex_method::run::{RunOptions, RunSummary};
use vortex_method::{DistSimulation, Simulator, State};
mod common;

/// A free-space ring of about a thousand particles: Heun, AB2 steps (the history in the
/// checkpoint of step 2), a re-interpolation at step 3; a checkpoint every 2 steps, 3 kept.
const RING: &str = r#"
nu = 0.001
dt = 0.05
t_end = 0.2
[evaluation]
method = "fmm"
order = 4
leaf_size = 32
[initial]
kind = "ring"
radius = 1.0
circulation = 1.0
core = 0.3
spacing = 0.3
[reinterpolation]
ratio = 0.0
every = 3
strain = 0.0
drop = 1e-3
[output]
diagnostics_every = 2
checkpoint_every = 2
checkpoints_kept = 3
progress = false
plots = false
"#;

/// Runs of different rank counts differ by round-off amplified by the re-interpolation (see
/// `tests/ranks.rs`).
const RANKS_TOL: f64 = 1e-10;

fn config(text: &str) -> Config {
    Config::from_str_named(text, "test.toml").unwrap()
}

fn run_all(
    ranks: usize,
    text: &str,
    out: &Path,
    restart: Option<&Path>,
    steps: Option<u64>,
) -> Vec<vortex_method::Result<RunSummary>> {
    let cfg = config(text);
    let opts = RunOptions {
        max_steps: steps,
        overwrite: false,
    };
    ThreadComm::run(ranks, |comm| {
        common::run_cpu(comm, cfg.clone(), out, restart, &opts)
    })
}

fn run(ranks: usize, text: &str, out: &Path, restart: Option<&Path>, steps: Option<u64>) {
    for (r, res) in run_all(ranks, text, out, restart, steps)
        .into_iter()
        .enumerate()
    {
        if let Err(e) = res {
            panic!("{} on {ranks} ranks, rank {r}: {e}", out.display());
        }
    }
}

fn whole(path: &Path) -> State {
    checkpoint::read_whole(path).unwrap().state
}

/// Largest difference of two states relative to the largest magnitude of each quantity.
fn rel_diff(a: &State, b: &State) -> f64 {
    assert_eq!(
        (a.step, a.step_reset, a.reinterpolations, a.particles.len()),
        (b.step, b.step_reset, b.reinterpolations, b.particles.len())
    );
    assert_eq!(a.previous.is_some(), b.previous.is_some());
    let flat = |v: &[[f64; 3]]| -> Vec<f64> { v.iter().flatten().copied().collect() };
    let rel = |x: &[f64], y: &[f64]| {
        let scale = x
            .iter()
            .chain(y)
            .fold(f64::MIN_POSITIVE, |m, v| m.max(v.abs()));
        x.iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs() / scale)
            .fold(0.0, f64::max)
    };
    let (p, q) = (&a.particles, &b.particles);
    let mut d = rel(&flat(&p.position), &flat(&q.position))
        .max(rel(&flat(&p.strength), &flat(&q.strength)))
        .max(rel(&p.sigma, &q.sigma));
    if let (Some(f), Some(g)) = (&a.previous, &b.previous) {
        d = d
            .max(rel(&flat(&f.velocity), &flat(&g.velocity)))
            .max(rel(&flat(&f.stretching), &flat(&g.stretching)));
    }
    d
}

/// The checkpoint of step 2 that the uninterrupted run `dir` of `ranks` ranks kept.
fn step_two(dir: &Path, ranks: usize) -> PathBuf {
    if ranks == 1 {
        dir.join("checkpoint.bin.1")
    } else {
        dir.join(format!("{MANIFEST_FILE}.1"))
    }
}

#[test]
fn pieces_continue_on_any_rank_count_as_the_single_file_does() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // the uninterrupted runs (each kept its checkpoints of steps 0, 2 and 4)
    let full = |r: usize| root.join(format!("full-{r}"));
    for r in 1..=4 {
        run(r, RING, &full(r), None, None);
        let names: Vec<String> = std::fs::read_dir(full(r))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let n_pieces = names
            .iter()
            .filter(|n| pieces::parse_piece_file(n).is_some())
            .count();
        if r == 1 {
            // one rank keeps the single file: nothing changes for one-rank users
            assert!(names.contains(&"checkpoint.bin".to_string()), "{names:?}");
            assert_eq!(n_pieces, 0, "{names:?}");
            assert!(!names.iter().any(|n| n.starts_with(MANIFEST_FILE)));
        } else {
            assert!(!names.contains(&"checkpoint.bin".to_string()), "{names:?}");
            assert_eq!(n_pieces, 3 * r, "{names:?}");
            let m = pieces::read_manifest(&full(r).join(MANIFEST_FILE)).unwrap();
            assert_eq!((m.step, m.pieces.len()), (4, r));
        }
        let mid = whole(&step_two(&full(r), r));
        assert_eq!(mid.step, 2);
        assert!(
            mid.previous.is_some(),
            "the AB2 history is in the checkpoint"
        );
    }
    for (rw, rr) in [(1, 2), (2, 3), (3, 4), (4, 1), (2, 2), (3, 3)] {
        let set = step_two(&full(rw), rw);
        // from the pieces (or the single file of one rank) ...
        let a = root.join(format!("from-{rw}-on-{rr}"));
        run(rr, RING, &a, Some(&set), None);
        // ... and from the single file of the same state
        let single = root.join(format!("single-{rw}"));
        std::fs::create_dir_all(&single).unwrap();
        let ck = checkpoint::read_whole(&set).unwrap();
        checkpoint::write(&single.join("checkpoint.bin"), &ck).unwrap();
        let b = root.join(format!("single-{rw}-on-{rr}"));
        run(rr, RING, &b, Some(&single.join("checkpoint.bin")), None);
        let (sa, sb, sf) = (whole(&a), whole(&b), whole(&full(rr)));
        assert_eq!(sa.step, 4);
        assert!(
            sa == sb,
            "written on {rw}, continued on {rr}: pieces and single file differ"
        );
        let d = rel_diff(&sa, &sf);
        eprintln!("written on {rw}, continued on {rr}: {d:.2e} from the run on {rr} ranks");
        if rw == rr {
            assert!(
                sa == sf,
                "a restart on the same ranks is bitwise the run ({d:e})"
            );
        } else {
            assert!(d < RANKS_TOL, "written on {rw}, continued on {rr}: {d:e}");
        }
    }
}

#[test]
fn the_state_read_back_is_the_state_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("three");
    run(3, RING, &out, None, Some(2));
    let cfg = config(RING);
    let written = whole(&out);
    assert_eq!(
        checkpoint::current(&out).unwrap(),
        Source::Manifest(out.join(MANIFEST_FILE))
    );
    for rr in [1, 2, 3, 4, 5] {
        let got = ThreadComm::run(rr, |comm| {
            let r = checkpoint::read_restart(comm, &cfg, Some(&out))
                .unwrap()
                .unwrap();
            // the even split by global id, as a scatter of the whole state gives it
            let n = r.local.n_global;
            let (lo, hi) = (n * comm.rank() / rr, n * (comm.rank() + 1) / rr);
            assert_eq!(r.local.ids, (lo as u64..hi as u64).collect::<Vec<_>>());
            r.local.into_global(comm)
        });
        assert!(
            got[0].as_ref() == Some(&written),
            "read on {rr} ranks: not the written state"
        );
    }
    // the host simulation from an arbitrary distribution of the particles steps exactly as
    // from the even split (its first evaluation moves them to their owners)
    let states = ThreadComm::run(3, |comm| {
        let (me, n) = (comm.rank() as u64, written.particles.len());
        let ids: Vec<u64> = (0..n as u64)
            .rev()
            .filter(|g| (g * 7 + 1) % 3 == me)
            .collect();
        let local = pick(&written, ids);
        let even = LocalState::scatter(comm, (me == 0).then(|| written.clone()));
        let cpu = || vortex_fmm::CpuBackend;
        let mut x = DistSimulation::resume(comm, cfg.clone(), cpu(), local).unwrap();
        let mut y = DistSimulation::resume(comm, cfg.clone(), cpu(), even).unwrap();
        x.step().unwrap();
        y.step().unwrap();
        (x.gather_state().unwrap(), y.gather_state().unwrap())
    });
    let (x, y) = &states[0];
    assert_eq!(x.as_ref().unwrap().step, 3);
    assert!(
        x == y,
        "the step depends on the distribution it started from"
    );
}

/// The particles `ids` of a whole state as one rank's part.
fn pick(st: &State, ids: Vec<u64>) -> LocalState {
    let p = &st.particles;
    let take = |v: &[[f64; 3]]| ids.iter().map(|&g| v[g as usize]).collect::<Vec<_>>();
    let take1 = |v: &[f64]| ids.iter().map(|&g| v[g as usize]).collect::<Vec<_>>();
    LocalState {
        state: State {
            particles: vortex_method::Particles {
                position: take(&p.position),
                strength: take(&p.strength),
                sigma: take1(&p.sigma),
                sigma0: take1(&p.sigma0),
            },
            previous: st
                .previous
                .as_ref()
                .map(|d| vortex_method::rhs::Derivatives {
                    velocity: take(&d.velocity),
                    stretching: take(&d.stretching),
                }),
            ..st.clone()
        },
        ids,
        n_global: st.particles.len(),
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Every rank's error of a restart on 2 ranks from the manifest of `dir` named explicitly, each
/// naming `file` and `what` (a restart from the directory takes its newest loadable checkpoint
/// instead). The readers of tools refuse the same set unless only the configuration differs.
fn refused(text: &str, dir: &Path, file: &str, what: &str) {
    let manifest = dir.join(MANIFEST_FILE);
    let res = run_all(2, text, dir, Some(&manifest), None);
    for (r, e) in res.into_iter().enumerate() {
        let e = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(file) && e.contains(what), "rank {r}: `{e}`");
    }
    if text == RING {
        let e = checkpoint::read_whole(dir).unwrap_err().to_string();
        assert!(e.contains(file) && e.contains(what), "{e}");
    }
}

#[test]
fn a_missing_truncated_corrupt_or_foreign_piece_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    run(3, RING, &src, None, Some(1));
    let m = pieces::read_manifest(&src.join(MANIFEST_FILE)).unwrap();
    assert_eq!((m.step, m.pieces.len()), (1, 3));
    let file = |i: usize| m.pieces[i].file.clone();
    let case = |name: &str| {
        let d = dir.path().join(name);
        copy_dir(&src, &d);
        d
    };
    let d = case("missing");
    std::fs::remove_file(d.join(file(1))).unwrap();
    refused(RING, &d, &file(1), "missing");
    let d = case("truncated");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join(file(2)))
        .unwrap();
    f.set_len(m.pieces[2].bytes - 9).unwrap();
    refused(RING, &d, &file(2), &m.pieces[2].bytes.to_string());
    let d = case("corrupt");
    let mut b = std::fs::read(d.join(file(0))).unwrap();
    let k = b.len() / 2;
    b[k] ^= 0x10;
    std::fs::write(d.join(file(0)), &b).unwrap();
    refused(RING, &d, &file(0), "checksum mismatch");
    // a piece of the checkpoint of step 0 in place of the one of step 1
    let d = case("foreign");
    let old = pieces::read_manifest(&d.join(format!("{MANIFEST_FILE}.1"))).unwrap();
    std::fs::copy(d.join(&old.pieces[1].file), d.join(file(1))).unwrap();
    refused(RING, &d, &file(1), &m.pieces[1].bytes.to_string());
    // a manifest of another configuration: the changed keys
    let d = case("config");
    refused(
        &RING.replace("nu = 0.001", "nu = 0.002"),
        &d,
        MANIFEST_FILE,
        "nu: checkpoint 0.001, this run 0.002",
    );
    // a piece is not a checkpoint on its own
    let e = checkpoint::read_whole(&src.join(file(0)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("one piece") && e.contains(MANIFEST_FILE), "{e}");
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn rotation_removes_the_unnamed_pieces_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let every_step = RING
        .replace("checkpoint_every = 2", "checkpoint_every = 1")
        .replace("checkpoints_kept = 3", "checkpoints_kept = 2")
        .replace("t_end = 0.2", "t_end = 0.35");
    // one rank first: its single files stay as they are when the run continues on three
    run(1, &every_step, &out, None, Some(2));
    let singles = [
        std::fs::read(out.join("checkpoint.bin")).unwrap(),
        std::fs::read(out.join("checkpoint.bin.1")).unwrap(),
    ];
    let orphan = pieces::piece_file(9, 7, 3);
    let mine = [
        "notes.txt",
        "checkpoint-notes.bin",
        "checkpoint-s00000001-w0000-p0000.bin.orig",
    ];
    for f in mine.iter().chain([&orphan.as_str()]) {
        std::fs::write(out.join(f), b"not a piece of this run").unwrap();
    }
    // continued on 3 ranks from the directory: checkpoints at steps 3, 4, 5, the last 2 kept
    run(3, &every_step, &out, Some(&out), Some(3));
    let m0 = pieces::read_manifest(&out.join(MANIFEST_FILE)).unwrap();
    let m1 = pieces::read_manifest(&out.join(format!("{MANIFEST_FILE}.1"))).unwrap();
    assert_eq!((m0.step, m1.step), (5, 4));
    assert!(!out.join(format!("{MANIFEST_FILE}.2")).exists());
    let mut want: Vec<String> = m0
        .pieces
        .iter()
        .chain(&m1.pieces)
        .map(|p| p.file.clone())
        .collect();
    want.sort();
    let have: Vec<String> = names(&out)
        .into_iter()
        .filter(|n| pieces::parse_piece_file(n).is_some())
        .collect();
    assert_eq!(have, want, "the pieces of the kept manifests, no other");
    // the sets are numbered after the orphan's serial: no name of the directory reused
    assert!(want
        .iter()
        .all(|f| pieces::parse_piece_file(f).unwrap().1 > 7));
    for f in mine {
        assert!(out.join(f).exists(), "{f} was removed");
    }
    assert_eq!(
        std::fs::read(out.join("checkpoint.bin")).unwrap(),
        singles[0]
    );
    assert_eq!(
        std::fs::read(out.join("checkpoint.bin.1")).unwrap(),
        singles[1]
    );
    // the directory's current checkpoint is the manifest (the later step)
    assert_eq!(
        checkpoint::current(&out).unwrap(),
        Source::Manifest(out.join(MANIFEST_FILE))
    );
    run(2, &every_step, &out, Some(&out), Some(1));
    assert_eq!(whole(&out).step, 6);
}

#[test]
fn a_write_stopped_before_its_manifest_leaves_the_previous_set() {
    let dir = tempfile::tempdir().unwrap();
    let every_step = RING.replace("checkpoint_every = 2", "checkpoint_every = 1");
    let full = dir.path().join("full");
    run(2, &every_step, &full, None, None);
    let out = dir.path().join("run");
    run(2, &every_step, &out, None, Some(2));
    // the manifest of the next checkpoint cannot be written (as if the job died there)
    let block = out.join(format!("{MANIFEST_FILE}.tmp"));
    std::fs::create_dir(&block).unwrap();
    std::fs::write(block.join("x"), b"x").unwrap();
    let res = run_all(2, &every_step, &out, Some(&out), None);
    for (r, e) in res.into_iter().enumerate() {
        let e = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("checkpoint.manifest.tmp"), "rank {r}: `{e}`");
    }
    let step3: Vec<String> = names(&out)
        .into_iter()
        .filter(|n| pieces::parse_piece_file(n).is_some_and(|(s, _, _)| s == 3))
        .collect();
    assert_eq!(step3.len(), 2, "the pieces of step 3 were written");
    let m = pieces::read_manifest(&out.join(MANIFEST_FILE)).unwrap();
    assert_eq!(
        m.step, 2,
        "the complete set of step 2 is still the current one"
    );
    std::fs::remove_dir_all(&block).unwrap();
    run(2, &every_step, &out, Some(&out), None);
    assert!(
        whole(&out) == whole(&full),
        "the continued run is bitwise the uninterrupted one"
    );
    for f in &step3 {
        assert!(!out.join(f).exists(), "{f}: the unnamed pieces are removed");
    }
}

#[test]
fn the_even_split_refuses_ids_missing_twice_or_out_of_range() {
    let cfg = config(RING);
    let mut built = vortex_method::initial::build(&cfg).unwrap().0;
    built.position.truncate(10);
    built.strength.truncate(10);
    built.sigma.truncate(10);
    built.sigma0.truncate(10);
    let st = State::initial(built);
    for (ids, what) in [
        (
            vec![vec![0, 1, 2, 3, 4], vec![5, 6, 7, 8, 8]],
            "held twice (8)",
        ),
        (
            vec![vec![0, 1, 2, 3, 4], vec![5, 6, 7, 8, 10]],
            "at or above",
        ),
        (vec![vec![0, 1, 2, 3], vec![5, 6, 7, 8]], "missing (4)"),
    ] {
        let res = ThreadComm::run(2, |comm: &ThreadComm| {
            let mine = ids[comm.rank()].clone();
            let mut part = pick(&st, mine.iter().map(|&g| g.min(9)).collect());
            part.ids = mine;
            let r = balance_by_gid(comm, part).map(|_| ());
            vortex_method::parallel::agree(comm, r.map_err(vortex_method::Error::Other))
        });
        for r in res {
            let e = r.unwrap_err().to_string();
            assert!(e.contains(what), "{what}: `{e}`");
        }
    }
}
