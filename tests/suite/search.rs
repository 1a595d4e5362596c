//! Integration tests for pen_search.
