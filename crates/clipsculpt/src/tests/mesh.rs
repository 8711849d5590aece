//! Export integration tests: our GLB / PLY / OBJ re-read by independent readers (gltf, ply-rs-bw, tobj), a
//! structural GLB check with the Khronos validator's essentials, and parity with Shap-E's reference decode.

use std::path::Path;

use crate::mesh::export::write_all;
use crate::mesh::{
    asset, colour, marching_cubes, sample_colours, shapes, Asset, AssetOptions, Bounds, FnField,
    Format, Grid, McMode, McOptions, Mesh,
};
use candle_core::Device;

/// A 48³ torus (χ = 0) coloured by position, so every vertex has a distinct colour.
fn coloured_torus() -> Mesh {
    let grid = Grid::from_fn(48, Bounds::SHAP_E, |p| shapes::torus(p, 0.5, 0.2)).unwrap();
    let mut mesh = marching_cubes(&grid, &McOptions::default()).unwrap();
    let field = FnField(|p: [f32; 3]| {
        (
            0.0,
            [(p[0] + 1.0) / 2.0, (p[1] + 1.0) / 2.0, p[2].abs() * 2.0],
        )
    });
    mesh.colours = sample_colours(&field, &Device::Cpu, &mesh.positions, 1000).unwrap();
    mesh
}

fn y_up(p: [f32; 3]) -> [f32; 3] {
    [p[0], p[2], -p[1]]
}

fn close(a: [f32; 3], b: [f32; 3], tol: f32) -> bool {
    (0..3).all(|k| (a[k] - b[k]).abs() <= tol)
}

fn assert_unit(n: [f32; 3]) {
    let len = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2]).sqrt();
    assert!((len - 1.0).abs() < 1e-4, "normal {n:?} has length {len}");
}

fn export(mesh: &Mesh, dir: &Path) {
    let formats = [
        Format::Glb,
        Format::Ply,
        Format::Obj,
        Format::PreviewPng,
        Format::PreviewGif,
    ];
    let asset = Asset {
        mesh: mesh.clone(),
        texture: None,
    };
    write_all(&asset, dir, "torus", &formats).unwrap();
}

/// The untextured GLB's primitive uses a PBR material: white base colour (× COLOR_0), metallic 0.
#[test]
fn glb_has_a_material_that_shows_the_vertex_colours() {
    let dir = tempfile::tempdir().unwrap();
    export(&coloured_torus(), dir.path());
    let (doc, _, _) = gltf::import(dir.path().join("torus.glb")).unwrap();
    let prim = doc.meshes().next().unwrap().primitives().next().unwrap();
    let pbr = prim.material().pbr_metallic_roughness();
    assert_eq!(prim.material().index(), Some(0));
    assert_eq!(pbr.base_color_factor(), [1.0; 4]);
    assert_eq!(pbr.metallic_factor(), 0.0);
    assert!((0.5..=1.0).contains(&pbr.roughness_factor()));
    assert!(pbr.base_color_texture().is_none());
}

/// A simplified, textured torus written as GLB and OBJ reads back with its material, texture and UVs: the
/// gltf crate decodes the embedded PNG, tobj finds the MTL's `map_Kd`, and both give the UVs we wrote.
#[test]
fn textured_glb_and_obj_read_back_with_material_texture_and_uvs() {
    let field = FnField(|p: [f32; 3]| {
        let c = [(p[0] + 1.0) / 2.0, (p[1] + 1.0) / 2.0, 0.3];
        (shapes::torus(p, 0.5, 0.2), c)
    });
    let mesh = coloured_torus();
    let opts = AssetOptions {
        faces: Some(1500),
        texture: Some(128),
        ..AssetOptions::RAW
    };
    let (a, report) = asset::build(mesh, &field, &Device::Cpu, &opts, 4096).unwrap();
    assert_eq!(report.texture, Some(128));
    let t = a.texture.as_ref().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = write_all(&a, dir.path(), "t", &[Format::Glb, Format::Obj]).unwrap();
    let names: Vec<_> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["t.glb", "t.obj", "t.mtl", "t_texture.png"]);
    let (doc, buffers, images) = gltf::import(dir.path().join("t.glb")).unwrap();
    let prim = doc.meshes().next().unwrap().primitives().next().unwrap();
    let info = prim
        .material()
        .pbr_metallic_roughness()
        .base_color_texture()
        .expect("a base colour texture");
    assert_eq!(info.tex_coord(), 0);
    let img = &images[info.texture().source().index()];
    assert_eq!((img.width, img.height), (128, 128));
    assert_eq!(img.pixels, t.image.as_raw().clone());
    let reader = prim.reader(|b| Some(&buffers[b.index()]));
    let uvs: Vec<[f32; 2]> = reader.read_tex_coords(0).unwrap().into_f32().collect();
    assert_eq!(uvs, t.uvs);
    assert!(
        reader.read_colors(0).is_none(),
        "COLOR_0 would tint the texture"
    );
    let (models, materials) = tobj::load_obj(
        dir.path().join("t.obj"),
        &tobj::LoadOptions {
            single_index: true,
            ..tobj::LoadOptions::default()
        },
    )
    .unwrap();
    let materials = materials.unwrap();
    assert_eq!(
        materials[0].diffuse_texture.as_deref(),
        Some("t_texture.png")
    );
    let m = &models[0].mesh;
    // tobj renumbers vertices in order of first use, so compare corner by corner; OBJ's v runs up.
    assert_eq!(m.indices.len(), a.mesh.faces.len() * 3);
    for (&theirs, &ours) in m.indices.iter().zip(a.mesh.faces.iter().flatten()) {
        let (i, [u, v]) = (theirs as usize, t.uvs[ours as usize]);
        assert!((m.texcoords[2 * i] - u).abs() < 1e-6, "u {u}");
        assert!((m.texcoords[2 * i + 1] - (1.0 - v)).abs() < 1e-6, "v {v}");
    }
}

#[test]
fn glb_reads_back_with_gltf() {
    let mesh = coloured_torus();
    let dir = tempfile::tempdir().unwrap();
    export(&mesh, dir.path());
    let (doc, buffers, _) = gltf::import(dir.path().join("torus.glb")).unwrap();
    let prim = doc.meshes().next().unwrap().primitives().next().unwrap();
    let reader = prim.reader(|b| Some(&buffers[b.index()]));
    let positions: Vec<[f32; 3]> = reader.read_positions().unwrap().collect();
    let normals: Vec<[f32; 3]> = reader.read_normals().unwrap().collect();
    let colours: Vec<[f32; 3]> = reader.read_colors(0).unwrap().into_rgb_f32().collect();
    let indices: Vec<u32> = reader.read_indices().unwrap().into_u32().collect();
    assert_eq!(positions.len(), mesh.positions.len());
    assert_eq!(indices.len(), mesh.faces.len() * 3);
    assert_eq!(
        indices,
        mesh.faces.iter().flatten().copied().collect::<Vec<_>>()
    );
    for i in 0..positions.len() {
        assert_eq!(positions[i], y_up(mesh.positions[i]));
        assert_eq!(normals[i], y_up(mesh.normals[i]));
        assert_unit(normals[i]);
        // COLOR_0 holds the linear colour itself.
        assert!(close(colours[i], mesh.colours[i], 1.0 / 255.0));
    }
}

#[test]
fn ply_reads_back_with_ply_rs_bw() {
    use ply_rs_bw::parser::Parser;
    use ply_rs_bw::ply::{DefaultElement, Property};
    let mesh = coloured_torus();
    let dir = tempfile::tempdir().unwrap();
    export(&mesh, dir.path());
    let mut file =
        std::io::BufReader::new(std::fs::File::open(dir.path().join("torus.ply")).unwrap());
    let ply = Parser::<DefaultElement>::new().read_ply(&mut file).unwrap();
    let verts = &ply.payload["vertex"];
    let faces = &ply.payload["face"];
    assert_eq!(
        (verts.len(), faces.len()),
        (mesh.positions.len(), mesh.faces.len())
    );
    let float = |e: &DefaultElement, k: &str| match e[k] {
        Property::Float(v) => v,
        ref other => panic!("{k} is {other:?}"),
    };
    let byte = |e: &DefaultElement, k: &str| match e[k] {
        Property::UChar(v) => v,
        ref other => panic!("{k} is {other:?}"),
    };
    for (i, v) in verts.iter().enumerate() {
        // PLY stays +Z up.
        assert_eq!(
            [float(v, "x"), float(v, "y"), float(v, "z")],
            mesh.positions[i]
        );
        let n = [float(v, "nx"), float(v, "ny"), float(v, "nz")];
        assert_unit(n);
        // Bytes are sRGB: decoding them gives back the linear colour within one step.
        let srgb = [byte(v, "red"), byte(v, "green"), byte(v, "blue")];
        let expect = colour::srgb_floats(mesh.colours[i]);
        assert!(
            close(srgb.map(|b| b as f32 / 255.0), expect, 1.0 / 255.0),
            "{srgb:?} vs {expect:?}"
        );
    }
    for (f, e) in faces.iter().enumerate() {
        let Property::ListInt(ref idx) = e["vertex_indices"] else {
            panic!("face {f}: {:?}", e["vertex_indices"])
        };
        assert_eq!(
            idx.iter().map(|&i| i as u32).collect::<Vec<_>>(),
            mesh.faces[f]
        );
    }
}

#[test]
fn obj_reads_back_with_tobj() {
    let mesh = coloured_torus();
    let dir = tempfile::tempdir().unwrap();
    export(&mesh, dir.path());
    let (models, _) =
        tobj::load_obj(dir.path().join("torus.obj"), &tobj::LoadOptions::default()).unwrap();
    assert_eq!(models.len(), 1);
    let m = &models[0].mesh;
    // tobj renumbers vertices in order of first use by a face, so compare corner by corner.
    assert_eq!(m.positions.len(), mesh.positions.len() * 3);
    assert_eq!(m.indices.len(), mesh.faces.len() * 3);
    let at = |v: &[f32], i: u32| {
        [
            v[3 * i as usize],
            v[3 * i as usize + 1],
            v[3 * i as usize + 2],
        ]
    };
    for (&theirs, &ours) in m.indices.iter().zip(mesh.faces.iter().flatten()) {
        let ours_n = ours as usize;
        assert!(close(
            at(&m.positions, theirs),
            y_up(mesh.positions[ours_n]),
            1e-6
        ));
        assert!(close(
            at(&m.normals, theirs),
            y_up(mesh.normals[ours_n]),
            1e-6
        ));
        assert_unit(at(&m.normals, theirs));
        assert!(close(
            at(&m.vertex_color, theirs),
            colour::srgb_floats(mesh.colours[ours_n]),
            1.0 / 255.0
        ));
    }
}

#[test]
fn all_three_formats_agree_on_counts_and_the_previews_exist() {
    let mesh = coloured_torus();
    let stats = mesh.stats();
    assert!(stats.is_clean_solid(), "{stats:?}");
    assert_eq!(stats.euler, 0);
    let dir = tempfile::tempdir().unwrap();
    export(&mesh, dir.path());
    let png = image::open(dir.path().join("torus_preview.png")).unwrap();
    assert_eq!((png.width(), png.height()), (1024, 512));
    assert!(
        std::fs::metadata(dir.path().join("torus_turntable.gif"))
            .unwrap()
            .len()
            > 1000
    );
}

mod glb_structure {
    //! The Khronos validator's essentials, checked by hand on our bytes.
    use super::*;
    use serde_json::Value;

    fn u32_at(b: &[u8], at: usize) -> usize {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
    }

    /// Every buffer view is 4-aligned inside the buffer and has a target; every accessor fills its view.
    fn check_views_and_accessors(doc: &Value, bin_len: usize) {
        let views = doc["bufferViews"].as_array().unwrap();
        for v in views {
            let (off, len) = (
                v["byteOffset"].as_u64().unwrap() as usize,
                v["byteLength"].as_u64().unwrap() as usize,
            );
            assert_eq!(off % 4, 0, "view offset aligned");
            assert!(off + len <= bin_len, "view inside the buffer");
            assert!(v["target"].as_u64().is_some());
        }
        let accessors = doc["accessors"].as_array().unwrap();
        for a in accessors {
            let view = &views[a["bufferView"].as_u64().unwrap() as usize];
            let width = match a["type"].as_str().unwrap() {
                "SCALAR" => 1,
                "VEC3" => 3,
                t => panic!("unexpected type {t}"),
            };
            let count = a["count"].as_u64().unwrap() as usize;
            assert_eq!(
                count * width * 4,
                view["byteLength"].as_u64().unwrap() as usize,
                "accessor fills its view"
            );
        }
    }

    #[test]
    fn header_chunks_views_accessors_and_indices_are_valid() {
        let mesh = coloured_torus();
        let dir = tempfile::tempdir().unwrap();
        export(&mesh, dir.path());
        let b = std::fs::read(dir.path().join("torus.glb")).unwrap();
        // Header: magic, version 2, total length.
        assert_eq!(&b[..4], b"glTF");
        assert_eq!(u32_at(&b, 4), 2);
        assert_eq!(u32_at(&b, 8), b.len());
        // JSON chunk, padded with spaces to 4 bytes.
        let json_len = u32_at(&b, 12);
        assert_eq!(&b[16..20], b"JSON");
        assert_eq!(json_len % 4, 0);
        let json = &b[20..20 + json_len];
        let doc: Value = serde_json::from_slice(json).unwrap();
        // BIN chunk follows, 4-aligned, and ends the file.
        let bin_at = 20 + json_len;
        let bin_len = u32_at(&b, bin_at);
        assert_eq!(&b[bin_at + 4..bin_at + 8], b"BIN\0");
        assert_eq!(bin_len % 4, 0);
        assert_eq!(bin_at + 8 + bin_len, b.len());
        let bin = &b[bin_at + 8..];
        assert_eq!(
            doc["buffers"][0]["byteLength"].as_u64().unwrap() as usize,
            bin_len
        );

        check_views_and_accessors(&doc, bin_len);
        let views = doc["bufferViews"].as_array().unwrap();
        let accessors = doc["accessors"].as_array().unwrap();
        let prim = &doc["meshes"][0]["primitives"][0];
        assert_eq!(prim["mode"], 4);
        let vertex_count = accessors[prim["attributes"]["POSITION"].as_u64().unwrap() as usize]
            ["count"]
            .as_u64()
            .unwrap() as usize;
        let floats = |a: &Value| -> Vec<[f32; 3]> {
            let v = &views[a["bufferView"].as_u64().unwrap() as usize];
            let off = v["byteOffset"].as_u64().unwrap() as usize;
            (0..a["count"].as_u64().unwrap() as usize)
                .map(|i| {
                    [0, 1, 2].map(|k| {
                        f32::from_le_bytes(bin[off + (i * 3 + k) * 4..][..4].try_into().unwrap())
                    })
                })
                .collect()
        };
        // POSITION min/max present and exact.
        let pos_acc = &accessors[prim["attributes"]["POSITION"].as_u64().unwrap() as usize];
        let pos = floats(pos_acc);
        for (axis, (lo, hi)) in pos_acc["min"]
            .as_array()
            .unwrap()
            .iter()
            .zip(pos_acc["max"].as_array().unwrap())
            .enumerate()
        {
            let (amin, amax) = pos
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), p| {
                    (l.min(p[axis]), h.max(p[axis]))
                });
            assert_eq!(
                (lo.as_f64().unwrap() as f32, hi.as_f64().unwrap() as f32),
                (amin, amax)
            );
        }
        // NORMAL unit length, COLOR_0 in [0, 1].
        floats(&accessors[prim["attributes"]["NORMAL"].as_u64().unwrap() as usize])
            .into_iter()
            .for_each(assert_unit);
        let cols = floats(&accessors[prim["attributes"]["COLOR_0"].as_u64().unwrap() as usize]);
        assert!(cols.iter().flatten().all(|c| (0.0..=1.0).contains(c)));
        // Indices: u32, in bounds, a multiple of 3.
        let idx_acc = &accessors[prim["indices"].as_u64().unwrap() as usize];
        assert_eq!(idx_acc["componentType"], 5125);
        let v = &views[idx_acc["bufferView"].as_u64().unwrap() as usize];
        assert_eq!(v["target"], 34963);
        let off = v["byteOffset"].as_u64().unwrap() as usize;
        let n = idx_acc["count"].as_u64().unwrap() as usize;
        assert_eq!(n % 3, 0);
        for i in 0..n {
            assert!(u32_at(bin, off + i * 4) < vertex_count);
        }
    }
}

mod shap_e_parity {
    //! `tests/fixtures/mesh/shap_e_mc_32.safetensors` is diffusers' `MeshDecoder` output for a synthetic 32³ field
    //! (script next to it).
    use super::*;
    use crate::mesh::tables;

    fn fixture() -> std::collections::HashMap<String, candle_core::Tensor> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/mesh/shap_e_mc_32.safetensors");
        candle_core::safetensors::load(path, &Device::Cpu).unwrap()
    }

    #[test]
    fn our_table_has_the_reference_triangle_count_for_every_case() {
        let counts = fixture()["tri_counts"].to_vec1::<i64>().unwrap();
        for (case, &want) in counts.iter().enumerate() {
            assert_eq!(tables::cases()[case].count as i64, want, "case {case}");
        }
    }

    #[test]
    fn parity_mode_matches_the_reference_decode() {
        let t = fixture();
        let field = t["field"].to_vec3::<f32>().unwrap(); // [x][y][z]
        let g = field.len();
        let mut values = vec![0.0; g * g * g];
        for (x, plane) in field.iter().enumerate() {
            for (y, row) in plane.iter().enumerate() {
                for (z, &v) in row.iter().enumerate() {
                    values[(z * g + y) * g + x] = v;
                }
            }
        }
        let grid = Grid::new([g; 3], Bounds::SHAP_E, values).unwrap();
        let mesh = marching_cubes(
            &grid,
            &McOptions {
                mode: McMode::ShapEParity,
                ..McOptions::default()
            },
        )
        .unwrap();
        let verts = t["verts"].to_vec2::<f32>().unwrap();
        let faces = t["faces"].to_vec2::<i64>().unwrap();
        assert_eq!(
            (mesh.positions.len(), mesh.faces.len()),
            (verts.len(), faces.len())
        );
        // Same vertex order (sorted global edge ids) and bit-identical positions.
        for (i, v) in verts.iter().enumerate() {
            assert_eq!(mesh.positions[i], [v[0], v[1], v[2]], "vertex {i}");
        }
        // Our generated table splits loops of 4+ vertices along other diagonals than the reference table in some
        // cases, so faces are compared through what they must share: the same edges count, topology, orientation
        // and (to chord accuracy) volume.
        let reference = Mesh {
            positions: mesh.positions.clone(),
            normals: mesh.normals.clone(),
            colours: mesh.colours.clone(),
            faces: faces
                .iter()
                .map(|f| [f[0] as u32, f[1] as u32, f[2] as u32])
                .collect(),
        };
        let (ours, theirs) = (mesh.stats(), reference.stats());
        assert!(ours.is_clean_solid(), "{ours:?}");
        assert!(theirs.is_clean_solid(), "{theirs:?}");
        assert_eq!(
            (ours.edges, ours.euler, ours.components),
            (theirs.edges, theirs.euler, theirs.components)
        );
        assert!((ours.signed_volume / theirs.signed_volume - 1.0).abs() < 1e-3);
    }
}
