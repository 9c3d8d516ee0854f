//! The tables against the sources: every declared kernel has the C signature of its source,
//! every kernel of a source is declared, and every set names the defines its source needs.

use super::*;
use crate::kernels::{KernelSource, ALL_SOURCES};

/// One parameter as the source spells it.
#[derive(Debug, PartialEq)]
struct CParam {
    name: String,
    pass: Pass,
    ctype: String,
}

/// The `extern "C"` kernels of a C text, in order: name and parameters.
fn parse_kernels(text: &str) -> Vec<(String, Vec<CParam>)> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("extern \"C\"") {
        let rest = &text[at + "extern \"C\"".len()..];
        let open = rest.find('(').expect("a kernel has a parameter list");
        let mut head = rest[..open].trim();
        let mut body = &rest[open..];
        // `__launch_bounds__(X)` before the name: skip its parentheses.
        if head.ends_with("__launch_bounds__") {
            let close = body
                .find(')')
                .expect("closing parenthesis of __launch_bounds__");
            body = &body[close + 1..];
            let open2 = body.find('(').expect("a kernel has a parameter list");
            head = body[..open2].trim();
            body = &body[open2..];
        }
        let name = head
            .split_whitespace()
            .last()
            .expect("a kernel has a name")
            .to_string();
        let close = body
            .find(')')
            .expect("closing parenthesis of the parameters");
        let params = body[1..close]
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(parse_param)
            .collect();
        out.push((name, params));
    }
    out
}

fn parse_param(p: &str) -> CParam {
    let spaced = p.replace('*', " * ");
    let mut toks: Vec<&str> = spaced
        .split_whitespace()
        .filter(|t| *t != "__restrict__")
        .collect();
    let name = toks.pop().expect("a parameter has a name").to_string();
    let is_const = toks.contains(&"const");
    let is_ptr = toks.contains(&"*");
    let ctype = toks
        .iter()
        .filter(|t| **t != "const" && **t != "*")
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    // `u64` is spectral.cu's name for `unsigned long long`
    let ctype = if ctype == "u64" {
        "unsigned long long".to_string()
    } else {
        ctype
    };
    let pass = match (is_ptr, is_const) {
        (true, true) => Pass::In,
        (true, false) => Pass::Out,
        (false, _) => Pass::Value,
    };
    CParam { name, pass, ctype }
}

/// A source's text with the headers it includes.
fn full_text(src: &KernelSource) -> String {
    std::iter::once(src.source)
        .chain(src.headers.iter().map(|h| h.source))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A source, the defines its set takes, and the tables of the kernels its module holds (its
/// own, and those of the sources it includes).
type Table = (
    KernelSource,
    &'static [&'static str],
    Vec<&'static [Signature]>,
);

fn tables() -> Vec<Table> {
    vec![
        (P2p::SOURCE, P2p::DEFINES, vec![P2p::SIGNATURES]),
        (Fmm::SOURCE, Fmm::DEFINES, vec![Fmm::SIGNATURES]),
        (Ppm::SOURCE, Ppm::DEFINES, vec![Ppm::SIGNATURES]),
        (
            Uniform::SOURCE,
            Uniform::DEFINES,
            vec![Uniform::SIGNATURES, P2p::SIGNATURES, Fmm::SIGNATURES],
        ),
        (
            Spectral::SOURCE,
            Spectral::DEFINES,
            vec![Spectral::SIGNATURES],
        ),
        (
            Resident::SOURCE,
            Resident::DEFINES,
            vec![Resident::SIGNATURES],
        ),
        (
            SlabFourier::SOURCE,
            SlabFourier::DEFINES,
            vec![SlabFourier::SIGNATURES],
        ),
        (Spread::SOURCE, Spread::DEFINES, vec![Spread::SIGNATURES]),
    ]
}

#[test]
fn the_parser_reads_every_extern_c_kernel() {
    let text = "extern \"C\" __global__ void __launch_bounds__(T) k1(\n    const float4* \
                __restrict__ a, int n,\n    unsigned long long* c)\n{}\nextern \"C\" \
                __global__ void k2(double2* __restrict__ in) {}";
    let k = parse_kernels(text);
    assert_eq!(k.len(), 2);
    assert_eq!(k[0].0, "k1");
    let p = |name: &str, pass, ctype: &str| CParam {
        name: name.into(),
        pass,
        ctype: ctype.into(),
    };
    assert_eq!(
        k[0].1,
        vec![
            p("a", Pass::In, "float4"),
            p("n", Pass::Value, "int"),
            p("c", Pass::Out, "unsigned long long")
        ]
    );
    assert_eq!(k[1].0, "k2");
    assert_eq!(k[1].1, vec![p("in", Pass::Out, "double2")]);
}

/// Every declared kernel has, parameter by parameter, the name, the passing (`const T*`,
/// `T*`, value) and the C type of its source; every `extern "C"` kernel of a module is
/// declared once; every set takes the defines its source requires.
#[test]
fn every_table_matches_its_source() {
    let tables = tables();
    for src in &ALL_SOURCES {
        assert!(
            tables.iter().any(|(s, _, _)| s.name == src.name),
            "kernels/{}.cu has no table",
            src.name
        );
    }
    for (src, defines, sets) in &tables {
        assert_eq!(*defines, src.required, "kernels/{}.cu: defines", src.name);
        let text = full_text(src);
        let kernels = parse_kernels(&text);
        assert_eq!(
            kernels.len(),
            text.matches("extern \"C\"").count(),
            "kernels/{}.cu: a kernel was not parsed",
            src.name
        );
        let declared: Vec<&Signature> = sets.iter().flat_map(|s| s.iter()).collect();
        for (name, params) in &kernels {
            let sig: Vec<_> = declared.iter().filter(|d| d.name == name).collect();
            assert_eq!(
                sig.len(),
                1,
                "kernels/{}.cu: {name} declared {} times",
                src.name,
                sig.len()
            );
            let got: Vec<CParam> = sig[0]
                .params
                .iter()
                .map(|p| CParam {
                    name: p.name.into(),
                    pass: p.pass,
                    ctype: p.ctype.into(),
                })
                .collect();
            assert_eq!(&got, params, "kernels/{}.cu: {name}", src.name);
        }
        for d in &declared {
            assert!(
                kernels.iter().any(|(n, _)| n == d.name),
                "kernels/{}.cu: {} declared but not in the source",
                src.name,
                d.name
            );
        }
    }
}

#[test]
fn raw_identifiers_lose_their_prefix() {
    assert_eq!(strip_raw("r#in"), "in");
    assert_eq!(strip_raw("rots"), "rots");
    assert_eq!(Fmm::SIGNATURES[1].params[0].name, "in");
}
