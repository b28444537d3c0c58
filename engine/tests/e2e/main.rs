//! End to end on loopback: the real `dsim` binary -> the real `fengine` binary -> a receiver in
//! this test (spead's `HeapAssembler`).
//!
//! - `tone_lands_in_its_channel`: a tone in channel k peaks in channel k of both polarisations at
//!   the amplitude the weights and gain predict.
//! - `dropped_heaps_give_exactly_the_predicted_gaps`: a dsim drop list removes exactly the output
//!   heaps whose spectra windows touch a dropped heap, the counters agree, the engine keeps going.
//! - `restarted_digitiser_is_followed`: dsim killed and started again (timestamps jump back to 0);
//!   clean output resumes within a few seconds without restarting the engine.
//! - `a_silent_polarisation_comes_back_cleanly`, `duplicated_reordered_corrupt_and_truncated_packets`:
//!   faults mid-stream (dsim's PUT /faults) are counted by reason and lose exactly the output heaps
//!   whose input was lost; none is sent twice.
//! - `delay_step_aligns_polarisations`: PUT /delays with dsim's per-polarisation delays makes the
//!   cross-power phase flat across the band.
//! - `the_control_token_comes_from_the_environment`: an engine started with FENGINE_CONTROL_TOKEN
//!   refuses a change without it (401) and takes one with it; GET stays open.
//! - `digitiser_clipping_is_counted_as_dsim_sent_it` (and `_with_receive_threads`): the engine's
//!   per-polarisation counts of the digitiser status items (heaps with the saturation bit,
//!   saturated samples) equal what dsim sent, in `/status` and `/metrics`.
//! - `two_wideband_outputs_each_carry_the_tone_in_their_own_channels`: `--wideband` outputs of
//!   n/4 and n channels to destinations of their own each carry the tone in the channel their
//!   channel count predicts, in heaps of their own size and step, and `/status` keeps each
//!   output's counters.
//! - `the_generators_fgpu_line_streams_on_both_outputs`: the engine started as `fgpu` with the
//!   command line katsdpcontroller generates (tests/fixtures, rewritten only for loopback, this
//!   host's cores and a CPU's rate) streams on its wideband and narrowband outputs, katcp and the
//!   HTTP API where fgpu's katcp and Prometheus ports say.
//! - `sigterm_at_the_first_log_line_stops_the_engine_cleanly` (and `_once_running`): SIGTERM
//!   however early gives exit status 0 and the engine's totals.
//!
//! The dsim binary is looked for next to the engine's (`target/<profile>/dsim`) and built with
//! `cargo build -p dsim` first (a no-op when it is fresh; set FENGINE_E2E_NO_BUILD=1 to skip).
//! FENGINE_E2E_BIN_DIR names a folder holding both `fengine` and `dsim` to use instead (for a
//! host without cargo: copy the binaries and this test's executable there).
//! Backend: FENGINE_TEST_BACKEND (default `cpu`; `cuda` on a GPU host).
//!
//! Sizes follow the build profile: in release (`cargo test -p fengine --release --test e2e`) 1024
//! channels, 4 taps, 64 spectra per heap at 32 Msample/s; in a debug build, where the CPU backend
//! manages well under 1 Msample/s, 256 channels at 0.25 Msample/s. The tests take turns (a lock)
//! so that they do not starve each other of the two cores: one test binary, so that the lock
//! holds across all of them.
//!
//! Modules, by job:
//! - [`setup`]: a run's configuration and what follows from it (steps, tone response), the lock.
//! - [`system`]: the engine and dsim as child processes, their binaries.
//! - [`client`]: HTTP to their control APIs (ureq), the engine's status as `fgpu_api` types.
//! - [`capture`]: the receiver of the engine's output heaps (one per output).
//! - one module per group of tests: [`tone`], [`dropped_heaps`], [`restart`], [`stream_faults`],
//!   [`delays`], [`token`], [`digitiser_status`], [`outputs`], [`signals`], [`katgpucbf`].

mod capture;
mod client;
mod setup;
mod system;

mod delays;
mod digitiser_status;
mod dropped_heaps;
mod katgpucbf;
mod outputs;
mod restart;
mod signals;
mod stream_faults;
mod token;
mod tone;
