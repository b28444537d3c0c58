//! katgpucbf's `fgpu` command line, as SARAO's katsdpcontroller generates it: the engine started
//! as `fgpu` (argv[0]; the images link `fgpu` to `fengine`) reads that form and runs as if given
//! the equivalent `fengine` line, so the rest of the engine is unchanged.
//!
//! One job a file: `flags` the form as clap parses it (every flag of katgpucbf's
//! `fgpu/main.py`), `output` its `--wideband`/`--narrowband name=...,key=value` language,
//! `network` interface names and katcp hosts to addresses, `translate` the way to our flags with
//! the notes the start-up log gives for flags that name a transport detail done another way.
//! docs/katgpucbf.md lists every flag and what becomes of it.

mod flags;
mod network;
mod output;
#[cfg(test)]
mod tests;
mod translate;

pub use flags::FgpuArgs;
pub use translate::{Translation, PROGRAM};

/// Whether `argv0` (the program's name as started) asks for katgpucbf's form.
pub fn invoked_as_fgpu(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0).file_name() == Some(std::ffi::OsStr::new(PROGRAM))
}
