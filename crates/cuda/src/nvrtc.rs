//! NVRTC compilation of a [`KernelSource`] with its named headers.
//!
//! cudarc's `compile_ptx_with_opts` creates the program without headers (its include paths
//! need files on disk), so the program is created here through `nvrtcCreateProgram` with the
//! embedded header sources and their include names, then compiled and read back with
//! cudarc's `nvrtc::result` wrappers.

use crate::error::{GpuError, GpuResult};
use crate::kernels::KernelSource;
use cudarc::nvrtc::{result, sys, Ptx};
use std::ffi::{c_char, c_int, CStr, CString};

/// Whether the NVRTC library can be loaded (never panics).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library under its candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// NVRTC options for a device of compute capability `cc`.
pub fn compile_options(cc: (i32, i32)) -> Vec<String> {
    vec![
        "--use_fast_math".into(),
        format!("--gpu-architecture=compute_{}{}", cc.0, cc.1),
        "--std=c++17".into(),
    ]
}

/// An NVRTC program, destroyed when dropped.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by `nvrtcCreateProgram` and is destroyed once.
        if let Err(e) = unsafe { result::destroy_program(self.0) } {
            log::warn!("nvrtcDestroyProgram: {e:?}");
        }
    }
}

fn c_string(what: &str, s: &str) -> GpuResult<CString> {
    CString::new(s).map_err(|_| GpuError::Unsupported(format!("{what} contains a NUL byte")))
}

/// The text of a NUL-terminated buffer filled by NVRTC.
fn text(buf: &[c_char]) -> String {
    // SAFETY: `c_char` and `u8` have the same size and alignment.
    let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len()) };
    CStr::from_bytes_until_nul(bytes)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(bytes).into_owned())
}

/// Compiles one source to PTX for compute capability `cc` with preprocessor `defines`
/// (`("ORDER", 10)` becomes `-DORDER=10`); its `#include "name"` directives resolve to
/// [`KernelSource::headers`]. Needs only NVRTC, no device. Every name of
/// [`KernelSource::required`] must be among `defines`.
pub fn compile(src: &KernelSource, cc: (i32, i32), defines: &[(&str, usize)]) -> GpuResult<Ptx> {
    if let Some(missing) = src
        .required
        .iter()
        .find(|r| !defines.iter().any(|(k, _)| k == *r))
    {
        return Err(GpuError::Compile {
            name: src.name,
            log: format!("the define {missing} is required (-D{missing}=value), not given"),
        });
    }
    if !nvrtc_present() {
        return Err(GpuError::NoNvrtc);
    }
    let mut options = compile_options(cc);
    options.extend(defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    let source = c_string(src.name, src.source)?;
    let name = c_string(src.name, &format!("{}.cu", src.name))?;
    let headers = src
        .headers
        .iter()
        .map(|h| c_string(h.name, h.source))
        .collect::<GpuResult<Vec<_>>>()?;
    let includes = src
        .headers
        .iter()
        .map(|h| c_string(h.name, h.name))
        .collect::<GpuResult<Vec<_>>>()?;
    let header_ptrs: Vec<*const c_char> = headers.iter().map(|c| c.as_ptr()).collect();
    let include_ptrs: Vec<*const c_char> = includes.iter().map(|c| c.as_ptr()).collect();
    let (hp, ip) = if header_ptrs.is_empty() {
        (std::ptr::null(), std::ptr::null())
    } else {
        (header_ptrs.as_ptr(), include_ptrs.as_ptr())
    };
    let fail = |what: &str, e: result::NvrtcError| GpuError::Compile {
        name: src.name,
        log: format!("{what}: {e:?}"),
    };
    let mut raw: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is a NUL-terminated string kept alive (`source`, `name`,
    // `headers`, `includes`) until the program is destroyed at the end of this function;
    // `hp` and `ip` hold `headers.len()` pointers each, or are null with a count of zero.
    unsafe {
        sys::nvrtcCreateProgram(
            &mut raw,
            source.as_ptr(),
            name.as_ptr(),
            headers.len() as c_int,
            hp,
            ip,
        )
    }
    .result()
    .map_err(|e| fail("nvrtcCreateProgram", e))?;
    let prog = Program(raw);
    // SAFETY: `prog.0` was created above and is not destroyed before `prog` is dropped.
    if let Err(e) = unsafe { result::compile_program(prog.0, &options) } {
        // SAFETY: as above.
        let log = unsafe { result::get_program_log(prog.0) }
            .map(|l| text(&l))
            .unwrap_or_default();
        return Err(GpuError::Compile {
            name: src.name,
            log: format!("{e:?} (options {options:?}):\n{log}"),
        });
    }
    // SAFETY: as above; the program compiled.
    let ptx = unsafe { result::get_ptx(prog.0) }.map_err(|e| fail("nvrtcGetPTX", e))?;
    Ok(Ptx::from_src(text(&ptx)))
}
