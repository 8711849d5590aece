//! mesh (work in progress).
