//! Fuzz target `manifest`: see `harness::manifest`.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::manifest(data));
