//! The `vortex` binary end to end: a real evaluation and every bad-input case.

mod common;
use std::path::Path;

fn vortex(args: &[&str]) -> (bool, String) {
    common::vortex_status(args, "warn")
}

fn write_npy_f64(path: &Path, shape: &[usize], data: &[f64]) {
    let shape_s = match shape {
        [a] => format!("({a},)"),
        [a, b] => format!("({a}, {b})"),
        _ => unreachable!(),
    };
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {shape_s}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in data {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

fn read_npy_f64(path: &Path) -> Vec<f64> {
    let b = std::fs::read(path).unwrap();
    let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
    b[10 + hl..]
        .chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn eval_matches_direct_and_writes_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.npy");
    let p_s = p.to_str().unwrap();
    assert!(vortex(&["particles", "--n", "1500", "--seed", "5", "--out", p_s]).0);
    let fmm_dir = dir.path().join("fmm");
    let dir_dir = dir.path().join("direct");
    for (out, extra) in [(&fmm_dir, &[][..]), (&dir_dir, &["--method", "direct"][..])] {
        let mut args = vec!["eval", "--particles", p_s, "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (ok, err) = vortex(&args);
        assert!(ok, "{err}");
    }
    for f in ["velocity.npy", "stretching.npy"] {
        let a = read_npy_f64(&fmm_dir.join(f));
        let b = read_npy_f64(&dir_dir.join(f));
        assert_eq!(a.len(), 1500 * 3);
        let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).powi(2)).sum();
        let den: f64 = b.iter().map(|y| y * y).sum();
        assert!((num / den).sqrt() < 1e-4, "{f}: {}", (num / den).sqrt());
    }
    let timing = std::fs::read_to_string(fmm_dir.join("timing.json")).unwrap();
    for k in [
        "tree", "lists", "P2M", "M2M", "M2L", "L2L", "L2P", "P2P", "total",
    ] {
        assert!(
            timing.contains(&format!("\"{k}\"")),
            "timing.json lacks {k}"
        );
    }
}

#[test]
fn bad_inputs_fail_with_clear_messages() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n);
    let out = d("out");
    let out_s = out.to_str().unwrap();
    let case = |file: &Path, extra: &[&str], expect: &[&str]| {
        let mut args = vec![
            "eval",
            "--particles",
            file.to_str().unwrap(),
            "--out",
            out_s,
        ];
        args.extend_from_slice(extra);
        let (ok, err) = vortex(&args);
        assert!(!ok, "accepted bad input {}", file.display());
        assert!(!err.contains("panicked"), "panic: {err}");
        for e in expect {
            assert!(
                err.contains(e),
                "message for {} lacks '{e}': {err}",
                file.display()
            );
        }
    };
    case(&d("missing.npy"), &[], &["missing.npy", "does not exist"]);
    std::fs::write(d("text.npy"), "hello").unwrap();
    case(&d("text.npy"), &[], &["text.npy", ".npy"]);
    write_npy_f64(&d("shape.npy"), &[4, 3], &[0.1; 12]);
    case(&d("shape.npy"), &[], &["shape.npy", "(4, 3)", "7"]);
    let mut row = vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.1];
    row.extend_from_slice(&[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, -0.2]);
    write_npy_f64(&d("sigma.npy"), &[2, 7], &row);
    case(&d("sigma.npy"), &[], &["sigma.npy", "row 1", "-0.2"]);
    row[1] = f64::NAN;
    row[13] = 0.2;
    write_npy_f64(&d("nan.npy"), &[2, 7], &row);
    case(&d("nan.npy"), &[], &["nan.npy", "row 0", "NaN"]);
    write_npy_f64(&d("empty.npy"), &[0, 7], &[]);
    case(&d("empty.npy"), &[], &["empty.npy", "N = 0"]);
    row[1] = 0.0;
    write_npy_f64(&d("good.npy"), &[2, 7], &row);
    case(&d("good.npy"), &["--order", "0"], &["p = 0"]);
    case(&d("good.npy"), &["--order", "99"], &["p = 99"]);
    case(&d("good.npy"), &["--theta", "1.5"], &["theta"]);
    // f32 data: wrong dtype
    let mut bytes = std::fs::read(d("good.npy")).unwrap();
    let pos = bytes.windows(3).position(|w| w == b"<f8").unwrap();
    bytes[pos + 2] = b'4';
    std::fs::write(d("f32.npy"), &bytes[..bytes.len() - 14 * 4]).unwrap();
    case(&d("f32.npy"), &[], &["f32.npy", "float64"]);
}
