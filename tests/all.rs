//! Integration tests, one binary: each module in `suite/` drives the real `pen` binary.

mod suite;
