//! The planner's choices (a table of requests -> engine) and its refusals with their reasons.

use vortex_fmm::planner::{
    choose, choose_for, Capabilities, Cause, Device, Engine, Layout, Request,
};
use vortex_fmm::{BackendChoice as B, GridChoice as G, Method as M, TargetKind as T};

fn req(method: M, backend: B, grid: G, periodic: bool, ranks: usize, targets: T) -> Request {
    Request {
        method,
        backend,
        grid,
        periodic,
        ranks,
        targets,
        n: 1000,
    }
}

const GPU: Capabilities = Capabilities {
    cuda_built: true,
    gpu_on_every_rank: true,
};
const NO_GPU: Capabilities = Capabilities {
    cuda_built: true,
    gpu_on_every_rank: false,
};
const NO_CUDA: Capabilities = Capabilities {
    cuda_built: false,
    gpu_on_every_rank: false,
};

#[test]
fn the_planner_chooses_by_the_table() {
    use Device::{Cpu, Cuda};
    #[rustfmt::skip]
    let table = [
        // method, backend, grid, periodic, ranks, targets, machine -> engine
        (M::Fmm, B::Auto, G::Adaptive, false, 1, T::Sources, GPU, Engine::Adaptive(Cuda)),
        (M::Fmm, B::Auto, G::Adaptive, false, 1, T::Sources, NO_GPU, Engine::Adaptive(Cpu)),
        (M::Fmm, B::Auto, G::Adaptive, false, 1, T::Sources, NO_CUDA, Engine::Adaptive(Cpu)),
        (M::Fmm, B::Cpu, G::Adaptive, true, 1, T::Points, GPU, Engine::Adaptive(Cpu)),
        (M::Ppm, B::Cuda, G::Adaptive, true, 1, T::SourcesWith, GPU, Engine::Adaptive(Cuda)),
        (M::Treecode, B::Cuda, G::Adaptive, false, 1, T::Points, GPU, Engine::Adaptive(Cuda)),
        (M::Treecode, B::Auto, G::Adaptive, true, 1, T::Sources, GPU, Engine::Adaptive(Cpu)),
        (M::Treecode, B::Auto, G::Adaptive, true, 2, T::Sources, GPU, Engine::Distributed(Cpu)),
        (M::Direct, B::Auto, G::Adaptive, false, 1, T::Sources, GPU, Engine::Direct),
        (M::Direct, B::Cpu, G::Adaptive, true, 1, T::Points, NO_GPU, Engine::Direct),
        (M::Direct, B::Cpu, G::Adaptive, false, 3, T::Points, NO_GPU, Engine::Distributed(Cpu)),
        (M::Fmm, B::Auto, G::Adaptive, true, 4, T::Sources, GPU, Engine::Distributed(Cuda)),
        (M::Ppm, B::Cpu, G::Adaptive, false, 2, T::Points, GPU, Engine::Distributed(Cpu)),
        (M::Fmm, B::Auto, G::Uniform, false, 1, T::Sources, GPU, Engine::UniformGrid),
        (M::Fmm, B::Cuda, G::Uniform, true, 1, T::Sources, GPU, Engine::UniformGrid),
        (M::Fmm, B::Cuda, G::Uniform, false, 2, T::Sources, GPU, Engine::UniformSlabs),
        (M::Fmm, B::Cuda, G::Uniform, true, 2, T::Sources, GPU, Engine::UniformSlabs),
        (M::Fmm, B::Auto, G::Uniform, true, 4, T::Sources, GPU, Engine::UniformSlabs),
        // grid auto: the uniform grid where it can run, else the adaptive octree
        (M::Fmm, B::Auto, G::Auto, false, 1, T::Sources, GPU, Engine::UniformGrid),
        (M::Fmm, B::Auto, G::Auto, true, 2, T::Sources, GPU, Engine::UniformSlabs),
        (M::Fmm, B::Auto, G::Auto, false, 1, T::Sources, NO_GPU, Engine::Adaptive(Cpu)),
        (M::Fmm, B::Cpu, G::Auto, true, 1, T::Sources, GPU, Engine::Adaptive(Cpu)),
        (M::Fmm, B::Auto, G::Auto, false, 1, T::Points, GPU, Engine::Adaptive(Cuda)),
        (M::Fmm, B::Cuda, G::Auto, false, 1, T::SourcesWith, GPU, Engine::Adaptive(Cuda)),
        (M::Ppm, B::Auto, G::Auto, false, 1, T::Sources, GPU, Engine::Adaptive(Cuda)),
        (M::Direct, B::Auto, G::Auto, false, 1, T::Sources, GPU, Engine::Direct),
        (M::Fmm, B::Auto, G::Auto, false, 3, T::Points, GPU, Engine::Distributed(Cuda)),
    ];
    for (i, (m, b, g, per, r, t, caps, want)) in table.into_iter().enumerate() {
        let rq = req(m, b, g, per, r, t);
        let c = choose(&rq, &caps).unwrap_or_else(|e| panic!("row {i}: refused: {e}"));
        assert_eq!(c.engine, want, "row {i}: {rq:?}");
        assert!(!c.reasons.is_empty(), "row {i}: a choice says why");
    }
}

#[test]
fn the_planner_refuses_with_reasons() {
    #[rustfmt::skip]
    let table = [
        // request, machine, words the reason must contain
        (req(M::Fmm, B::Cuda, G::Adaptive, false, 1, T::Sources), NO_GPU, "no usable GPU"),
        (req(M::Fmm, B::Cuda, G::Adaptive, false, 1, T::Sources), NO_CUDA, "without the `cuda` feature"),
        (req(M::Fmm, B::Cpu, G::Uniform, false, 1, T::Sources), GPU, "GPU only"),
        (req(M::Fmm, B::Auto, G::Uniform, false, 1, T::Sources), NO_GPU, "GPU only"),
        (req(M::Treecode, B::Cuda, G::Uniform, false, 1, T::Sources), GPU, "FMM only"),
        (req(M::Ppm, B::Cuda, G::Uniform, false, 1, T::Sources), GPU, "FMM only"),
        (req(M::Fmm, B::Cuda, G::Uniform, false, 1, T::Points), GPU, "separate targets"),
        (req(M::Fmm, B::Cuda, G::Uniform, false, 1, T::SourcesWith), GPU, "other strengths"),
        // what no machine would run is said before a missing GPU
        (req(M::Fmm, B::Auto, G::Uniform, false, 1, T::Points), NO_GPU, "separate targets"),
        (req(M::Direct, B::Cpu, G::Uniform, false, 1, T::Sources), NO_GPU, "FMM only"),
        (req(M::Fmm, B::Cpu, G::Adaptive, false, 0, T::Sources), GPU, "no ranks"),
        (req(M::Treecode, B::Cuda, G::Adaptive, true, 1, T::Sources), GPU, "periodic treecode"),
    ];
    for (i, (rq, caps, words)) in table.into_iter().enumerate() {
        let e = choose(&rq, &caps).expect_err(&format!("row {i}: {rq:?} must be refused"));
        let text = e.to_string();
        assert!(text.contains(words), "row {i}: `{text}` lacks `{words}`");
        assert!(
            text.contains(&rq.method.to_string()),
            "row {i}: `{text}` names the request"
        );
    }
}

#[test]
fn choices_parse_and_refuse_unknown_names_with_the_valid_ones() {
    assert_eq!("cuda".parse::<B>(), Ok(B::Cuda));
    assert_eq!("uniform".parse::<G>(), Ok(G::Uniform));
    for g in [G::Auto, G::Adaptive, G::Uniform] {
        assert_eq!(g.to_string().parse::<G>(), Ok(g));
    }
    let e = "opencl".parse::<B>().unwrap_err();
    assert!(
        e.contains("opencl") && e.contains("auto, cpu or cuda"),
        "{e}"
    );
    let e = "octree".parse::<G>().unwrap_err();
    assert!(
        e.contains("octree") && e.contains("auto, adaptive or uniform"),
        "{e}"
    );
    for b in [B::Auto, B::Cpu, B::Cuda] {
        assert_eq!(b.to_string().parse::<B>(), Ok(b));
    }
}

#[test]
fn refusals_name_their_cause() {
    let r = |b, g, t| req(M::Fmm, b, g, false, 1, t);
    let cause = |rq: Request, caps| choose(&rq, &caps).unwrap_err().cause;
    for (rq, caps, want) in [
        (r(B::Cuda, G::Adaptive, T::Sources), NO_GPU, Cause::Machine),
        (r(B::Auto, G::Uniform, T::Sources), NO_GPU, Cause::Machine),
        (r(B::Cpu, G::Uniform, T::Sources), GPU, Cause::Request),
        (r(B::Cuda, G::Uniform, T::Points), GPU, Cause::Request),
        (r(B::Auto, G::Uniform, T::Points), NO_GPU, Cause::Request),
    ] {
        assert_eq!(cause(rq, caps), want, "{rq:?}");
    }
    let mut tree = r(B::Cuda, G::Uniform, T::Sources);
    tree.method = M::Treecode;
    assert_eq!(cause(tree, GPU), Cause::Request);
}

#[test]
fn a_clustered_set_keeps_off_the_uniform_grid() {
    let max = vortex_fmm::layout::MAX_CROWDING;
    let even = Layout::Crowding(1.02);
    let crowded = Layout::Crowding(3.0 * max);
    for ranks in [1, 2] {
        let rq = req(M::Fmm, B::Cuda, G::Uniform, true, ranks, T::Sources);
        assert!(choose_for(&rq, &GPU, even).is_ok());
        // just at the limit is still accepted, above it refused with the figure and the way out
        assert!(choose_for(&rq, &GPU, Layout::Crowding(max)).is_ok());
        let e = choose_for(&rq, &GPU, crowded).unwrap_err();
        assert_eq!(e.cause, Cause::Request);
        let text = e.to_string();
        assert!(
            text.contains("clustered") && text.contains("12.0") && text.contains("grid adaptive"),
            "{text}"
        );
        // grid auto falls back to the adaptive octree and says why
        let auto = req(M::Fmm, B::Cuda, G::Auto, true, ranks, T::Sources);
        let c = choose_for(&auto, &GPU, crowded).unwrap();
        let want = if ranks == 1 {
            Engine::Adaptive(Device::Cuda)
        } else {
            Engine::Distributed(Device::Cuda)
        };
        assert_eq!(c.engine, want);
        assert!(
            c.reasons.iter().any(|r| r.contains("clustered")),
            "{:?}",
            c.reasons
        );
        let c = choose_for(&auto, &GPU, even).unwrap();
        assert!(matches!(
            c.engine,
            Engine::UniformGrid | Engine::UniformSlabs
        ));
        assert!(
            c.reasons.iter().any(|r| r.contains("crowding 1.02")),
            "{:?}",
            c.reasons
        );
    }
    // the adaptive octree takes any set
    let rq = req(M::Fmm, B::Cuda, G::Adaptive, false, 1, T::Sources);
    assert_eq!(
        choose_for(&rq, &GPU, crowded).unwrap().engine,
        Engine::Adaptive(Device::Cuda)
    );
}
