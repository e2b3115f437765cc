//! berth's integration tests, built as one binary.
