/// Why a placement could not be applied, worded for the user who asked for it.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// A core list that does not parse.
    #[error("{0}")]
    Parse(String),
    /// Cores outside those the process may use.
    #[error("cores {asked} are not all among the cores this process may use ({allowed})")]
    NotAllowed {
        /// The cores asked for.
        asked: String,
        /// The process's own set.
        allowed: String,
    },
    /// `sched_setaffinity` failed.
    #[error("could not pin the thread to cores {cores}: {error}")]
    Pin {
        /// The cores asked for.
        cores: String,
        /// What the kernel said.
        error: std::io::Error,
    },
    /// `sched_setscheduler` was refused for want of privilege.
    #[error(
        "{policy} needs CAP_SYS_NICE, root or an RLIMIT_RTPRIO of at least its priority, and a \
         real-time budget for the process's cgroup (containers: cap_add SYS_NICE or ulimits \
         rtprio, and with cgroup v1 --cpu-rt-runtime); the kernel said: {error}; run without \
         the real-time flag to use normal scheduling"
    )]
    Realtime {
        /// The policy asked for.
        policy: String,
        /// What the kernel said.
        error: std::io::Error,
    },
    /// `mlockall` failed.
    #[error(
        "could not lock the process's memory (mlockall): {error}; it needs CAP_IPC_LOCK or a \
         large enough RLIMIT_MEMLOCK (containers: ulimits memlock -1)"
    )]
    Lock {
        /// What the kernel said.
        error: std::io::Error,
    },
}
