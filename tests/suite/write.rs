//! Integration tests for pen_create and pen_edit.
