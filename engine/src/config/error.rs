//! How the configuration refuses: one sentence for the user.

/// Why a command line does not make a working engine: one sentence for the user.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl From<String> for ConfigError {
    fn from(s: String) -> Self {
        Self(s)
    }
}

/// Makes a message a sentence: capital first letter is left alone, a full stop is added.
pub fn sentence(s: impl Into<String>) -> String {
    let s = s.into();
    if s.ends_with('.') {
        s
    } else {
        s + "."
    }
}
