//! cpu backend (to be written).
