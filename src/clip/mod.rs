//! clip (work in progress).
