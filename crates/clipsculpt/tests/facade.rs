//! The library's facade, driven as `examples/api.rs` drives it (`RunSettings::default()`), gives the
//! result of the CLI's main command, `clipsculpt generate "a red cube"`: the latent that command wrote
//! (the fixture the CLI's tests also compare with, written by the binary).

#[path = "../examples/api.rs"]
mod api;

#[test]
fn default_settings_through_the_facade_give_the_clis_latent() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("red");
    let report = api::run("a red cube", &out)?;
    assert!(report.mesh.is_some(), "{:?}", report.no_mesh);
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/red_cube_seed0_latent.safetensors"
    );
    let latent = std::fs::read(out.join("latent.safetensors"))?;
    assert!(
        latent == std::fs::read(fixture)?,
        "the facade's latent differs from the CLI's"
    );
    Ok(())
}
