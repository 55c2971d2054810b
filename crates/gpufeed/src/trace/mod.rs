//! trace
