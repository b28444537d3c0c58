//! Acceptance tests live in tests/tests/.
