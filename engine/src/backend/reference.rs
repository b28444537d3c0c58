//! reference backend (to be written).
