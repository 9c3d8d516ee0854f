//! The planner's choices (a table of requests -> engine) and its refusals with their reasons.

use vortex_fmm::planner::{choose, Capabilities, Device, Engine, Request};
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
    let e = "opencl".parse::<B>().unwrap_err();
    assert!(
        e.contains("opencl") && e.contains("auto, cpu or cuda"),
        "{e}"
    );
    let e = "octree".parse::<G>().unwrap_err();
    assert!(
        e.contains("octree") && e.contains("adaptive or uniform"),
        "{e}"
    );
    for b in [B::Auto, B::Cpu, B::Cuda] {
        assert_eq!(b.to_string().parse::<B>(), Ok(b));
    }
}
