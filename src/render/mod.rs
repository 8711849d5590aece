//! render (work in progress).
