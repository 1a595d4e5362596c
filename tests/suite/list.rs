//! Integration tests for pen_list.
