//! null backend (to be written).
