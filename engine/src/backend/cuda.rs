//! cuda backend (to be written).
