//! Integration tests for pen_read.
