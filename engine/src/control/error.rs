//! Why the controller refused a request: one variant per reason, each read as one sentence for the
//! user. A front chooses how to carry a refusal (the HTTP front its status code, [`super::http`]);
//! the controller only says what is wrong.

use crate::signal::SignalError;
use crate::stats::MAX_PENDING_DELAYS;

use super::delays::TIMESTAMP_LIMIT;

/// A request the controller refused; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// No output of that name.
    #[error("this engine has no output named \"{name}\"; its outputs are: {outputs}.")]
    NoSuchOutput {
        /// The name asked for.
        name: String,
        /// The engine's outputs, comma-separated, in configuration order.
        outputs: String,
    },
    /// The pipeline's command queue is full.
    #[error("the engine has too many requests queued; try again.")]
    Busy,
    /// The pipeline no longer takes commands.
    #[error("the engine is stopping.")]
    Stopping,
    /// A request panicked while holding the loaded state.
    #[error("state lock poisoned.")]
    Poisoned,
    /// A delay or gain request that names neither polarisation.
    #[error("give pol0, pol1 or both.")]
    NoPolarisation,
    /// A delay request with both kinds of load time.
    #[error("give load_timestamp or load_time, not both.")]
    TwoLoadTimes,
    /// A load time as a Unix time, on an engine without `--sync-time`.
    #[error(
        "load_time (Unix seconds) needs the engine's --sync-time; give load_timestamp (ADC samples) instead."
    )]
    LoadTimeNeedsSyncTime,
    /// A Unix load time before the sync time (or too far after it).
    #[error("load_time {load_time} is not a Unix time after the sync time {sync_time}.")]
    LoadTimeNotAfterSync {
        /// The load time asked for, Unix seconds.
        load_time: f64,
        /// The engine's `--sync-time`.
        sync_time: f64,
    },
    /// A load time no 48-bit timestamp reaches.
    #[error(
        "the load time is ADC sample {load}, past the stream's 48-bit timestamps (at most {max}).",
        max = TIMESTAMP_LIMIT - 1
    )]
    LoadPastTimestamps {
        /// The load time, ADC samples.
        load: u64,
    },
    /// katgpucbf's delay text that does not read as four numbers.
    #[error("pol{pol} delay \"{text}\" is not \"delay,delay_rate:phase,phase_rate\" (numbers).")]
    DelayText {
        /// The polarisation.
        pol: usize,
        /// The text given.
        text: String,
    },
    /// A delay value or a gain that is not a finite number.
    #[error("pol{pol} {what} {value} is not a finite number.")]
    NotFinite {
        /// The polarisation.
        pol: usize,
        /// Which value: `delay`, `delay_rate`, `phase`, `phase_rate` or `gain`.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// A delay beyond `--max-delay`.
    #[error("pol{pol} delay {delay} s is beyond --max-delay ({max_delay} s) in size.")]
    DelayTooLarge {
        /// The polarisation.
        pol: usize,
        /// The delay asked for, s.
        delay: f64,
        /// `--max-delay`, s.
        max_delay: f64,
    },
    /// A delay rate of 1 s/s or more in size.
    #[error("pol{pol} delay rate {delay_rate} s/s is not below 1 in size.")]
    DelayRateTooLarge {
        /// The polarisation.
        pol: usize,
        /// The delay rate asked for, s/s.
        delay_rate: f64,
    },
    /// A phase rate past half a turn per sample.
    #[error(
        "pol{pol} phase rate {phase_rate:e} rad/s is beyond pi times the sample rate ({max:e} rad/s) in size."
    )]
    PhaseRateTooLarge {
        /// The polarisation.
        pol: usize,
        /// The phase rate asked for, rad/s.
        phase_rate: f64,
        /// Pi times the sample rate, rad/s.
        max: f64,
    },
    /// Too many delay models already wait for their load time.
    #[error(
        "pol{pol} already has {pending} delay models waiting for their load time (at most {max}); load fewer ahead.",
        max = MAX_PENDING_DELAYS
    )]
    TooManyPending {
        /// The polarisation.
        pol: usize,
        /// Models waiting.
        pending: u64,
    },
    /// A list of gains that is not one per channel.
    #[error("pol{pol} has {given} gains; give one per channel ({channels}) or a single value.")]
    GainCount {
        /// The polarisation.
        pol: usize,
        /// Gains given.
        given: usize,
        /// The output's channels.
        channels: usize,
    },
    /// A centre for an output that has none.
    #[error(
        "output \"{output}\" is a wideband output: only a narrowband output has a centre to change."
    )]
    NoCentre {
        /// The output named.
        output: String,
    },
    /// A centre whose band does not fit (or that is not a frequency).
    #[error("output \"{output}\": {reason}.")]
    Centre {
        /// The output named.
        output: String,
        /// What is wrong with the centre.
        reason: SignalError,
    },
}
