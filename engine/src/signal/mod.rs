//! Signal maths shared by every backend.
