"""Blender preview of a clipsculpt run: import, vertex-colour material, camera, soft light, render.

Runs inside Blender's own Python (no extra packages), headless:

    blender -b --factory-startup --python-exit-code 1 -P scripts/blender/preview.py -- INPUT [options]

INPUT is a run folder (its mesh.glb, else mesh.ply, else mesh.obj) or one .glb/.gltf/.ply/.obj file.

Options (after the `--`):
    --out PNG        still image, or the turntable's contact sheet when --frames > 0
                     (default: INPUT/blender_preview.png, or <mesh>_blender.png beside a mesh file)
    --frames N       render an N-frame turntable into --frames-dir (PNG per frame) plus a contact sheet
    --frames-dir D   folder of the turntable frames (default: blender_frames beside --out)
    --engine E       cycles (default), eevee or workbench
    --size PX        image side in pixels (default 384)
    --samples N      Cycles/EEVEE samples (default 16)
    --blend PATH     also save the set-up scene as a .blend
    --mask PNG       also write the object mask of the still (or of frame 0; white = object), from Cycles'
                     object index pass
    --stats JSON     write what Blender imported (vertices, faces, colour attributes, world bounding box,
                     mean vertex colour, radius near the top and bottom) and the render settings
    --no-render      import and write --stats only

Conventions (the files clipsculpt writes): Blender is +Z up. glTF/OBJ are +Y up and Blender's importers turn them
to +Z up; PLY is read as +Z up unchanged. glTF COLOR_0 is linear, PLY/OBJ colours are sRGB; each importer converts
to Blender's linear colour attribute, which the material reads directly. Renders use the "Standard" view transform,
so a pixel of a flat-lit surface is the sRGB encoding of its colour.

Blender 3.4 (Debian stable) and 4.x are supported (checked with 3.4.1 and 4.5 LTS): the importer is chosen by
version. --mask uses the compositor API of 3.x/4.x (`scene.node_tree`), which Blender 5 replaced.
"""

import argparse
import json
import math
import os
import sys
import time

import bpy
from mathutils import Vector

MESH_NAMES = ("mesh.glb", "mesh.ply", "mesh.obj")
ENGINES = {"cycles": "CYCLES", "eevee": "BLENDER_EEVEE", "workbench": "BLENDER_WORKBENCH"}
OBJECT_INDEX = 1


def fail(msg):
    """Stops with one line on stderr and exit code 1 (Blender's --python-exit-code)."""
    raise SystemExit("clipsculpt preview: " + msg)


def parse_args(argv):
    argv = argv[argv.index("--") + 1:] if "--" in argv else []
    p = argparse.ArgumentParser(prog="preview.py", description=__doc__.split("\n")[0])
    p.add_argument("input")
    p.add_argument("--out")
    p.add_argument("--frames", type=int, default=0)
    p.add_argument("--frames-dir")
    p.add_argument("--engine", choices=sorted(ENGINES), default="cycles")
    p.add_argument("--size", type=int, default=384)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--blend")
    p.add_argument("--mask")
    p.add_argument("--stats")
    p.add_argument("--no-render", action="store_true")
    a = p.parse_args(argv)
    if a.frames < 0 or a.frames > 720:
        fail("--frames must be within 0..=720")
    if a.size < 16 or a.size > 4096:
        fail("--size must be within 16..=4096")
    if a.samples < 1:
        fail("--samples must be at least 1")
    return a


def find_mesh(path):
    """The mesh file of a run folder (GLB first), or the file itself."""
    if os.path.isdir(path):
        for name in MESH_NAMES:
            f = os.path.join(path, name)
            if os.path.isfile(f):
                return f
        fail(f"{path} has none of {', '.join(MESH_NAMES)}")
    if not os.path.isfile(path):
        fail(f"{path} does not exist")
    return path


def import_mesh(path):
    """Imports `path` with the importer this Blender has and returns one mesh object."""
    ext = os.path.splitext(path)[1].lower()
    version = bpy.app.version
    before = set(bpy.data.objects)
    if ext in (".glb", ".gltf"):
        try:
            import numpy

            if "bool" not in numpy.__dict__:
                # Blender 3.4's glTF importer uses numpy.bool, removed in numpy 1.24 (Debian's Blender has both).
                numpy.bool = bool
        except ImportError:
            pass
        op, name = bpy.ops.import_scene.gltf, "import_scene.gltf"
    elif ext == ".ply":
        # The C++ importer replaced the Python add-on in 3.6.
        if version >= (3, 6, 0):
            op, name = bpy.ops.wm.ply_import, "wm.ply_import"
        else:
            op, name = bpy.ops.import_mesh.ply, "import_mesh.ply"
    elif ext == ".obj":
        # The C++ importer (with vertex colours) is built in from 3.3; 4.x has no other.
        op, name = bpy.ops.wm.obj_import, "wm.obj_import"
    else:
        fail(f"{path}: unsupported mesh format {ext!r} (use .glb, .gltf, .ply or .obj)")
    result = op(filepath=path)
    if "FINISHED" not in result:
        fail(f"{name} could not import {path}")
    meshes = [o for o in bpy.data.objects if o not in before and o.type == "MESH"]
    if not meshes:
        fail(f"{path}: the importer created no mesh object")
    if len(meshes) > 1:
        bpy.ops.object.select_all(action="DESELECT")
        for o in meshes:
            o.select_set(True)
        bpy.context.view_layer.objects.active = meshes[0]
        bpy.ops.object.join()
    obj = meshes[0]
    return obj, name


def colour_attribute(mesh):
    """The mesh's active colour attribute (any domain/type), or None."""
    attrs = mesh.color_attributes
    if len(attrs) == 0:
        return None
    active = attrs.active_color
    return active if active is not None else attrs[0]


def srgb(u):
    """Linear to sRGB encoding (IEC 61966-2-1), clamped to [0, 1]."""
    u = min(max(u, 0.0), 1.0)
    return u * 12.92 if u <= 0.0031308 else 1.055 * u ** (1.0 / 2.4) - 0.055


def vertex_colours(mesh, attr):
    """Linear RGB per vertex (corner colours averaged per vertex)."""
    n = len(mesh.vertices)
    flat = [0.0] * (4 * len(attr.data))
    attr.data.foreach_get("color", flat)
    if attr.domain == "POINT":
        return [tuple(flat[4 * i:4 * i + 3]) for i in range(n)]
    sums = [[0.0, 0.0, 0.0, 0] for _ in range(n)]
    vi = [0] * len(mesh.loops)
    mesh.loops.foreach_get("vertex_index", vi)
    for k, v in enumerate(vi):
        s = sums[v]
        s[0] += flat[4 * k]
        s[1] += flat[4 * k + 1]
        s[2] += flat[4 * k + 2]
        s[3] += 1
    return [(s[0] / s[3], s[1] / s[3], s[2] / s[3]) if s[3] else (0.0, 0.0, 0.0) for s in sums]


def world_vertices(obj):
    m = obj.matrix_world
    return [m @ v.co for v in obj.data.vertices]


def mesh_stats(obj, importer, path):
    """What Blender imported, in world space."""
    me = obj.data
    pts = world_vertices(obj)
    lo = [min(p[k] for p in pts) for k in range(3)]
    hi = [max(p[k] for p in pts) for k in range(3)]
    cx, cy = (lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2
    height = hi[2] - lo[2]

    def radius(keep):
        r = [math.hypot(p[0] - cx, p[1] - cy) for p in pts if keep(p[2])]
        return max(r) if r else 0.0

    attr = colour_attribute(me)
    stats = {
        "file": path,
        "importer": importer,
        "vertices": len(me.vertices),
        "faces": len(me.polygons),
        "colour_attributes": [[a.name, a.domain, a.data_type] for a in me.color_attributes],
        "bbox_min": lo,
        "bbox_max": hi,
        # Widest horizontal distance from the vertical axis through the box centre, among the vertices in the
        # top and the bottom 15% of the height: a cone standing on its base has top << bottom.
        "top_radius": radius(lambda z: z >= hi[2] - 0.15 * height),
        "bottom_radius": radius(lambda z: z <= lo[2] + 0.15 * height),
    }
    if attr is not None:
        cols = vertex_colours(me, attr)
        n = max(len(cols), 1)
        stats["colour_attribute"] = attr.name
        stats["mean_colour_linear"] = [sum(c[k] for c in cols) / n for k in range(3)]
        stats["mean_colour_srgb"] = [sum(srgb(c[k]) for c in cols) / n for k in range(3)]
    return stats


def vertex_colour_material(attr_name):
    """Principled BSDF whose base colour is the colour attribute (linear, as Blender stores it)."""
    mat = bpy.data.materials.new("clipsculpt_vertex_colour")
    mat.use_nodes = True
    nodes, links = mat.node_tree.nodes, mat.node_tree.links
    bsdf = next(n for n in nodes if n.type == "BSDF_PRINCIPLED")
    col = nodes.new("ShaderNodeVertexColor")
    col.layer_name = attr_name
    links.new(col.outputs["Color"], bsdf.inputs["Base Color"])
    set_input(bsdf, ("Roughness",), 0.8)
    # Matte: a white sheen of the sky would lift the dark channels (+0.07 sRGB on a red's green and blue, measured).
    # 3.x calls the input Specular, 4.x Specular IOR Level.
    set_input(bsdf, ("Specular", "Specular IOR Level"), 0.0)
    return mat


def set_input(node, names, value):
    for n in names:
        if n in node.inputs:
            node.inputs[n].default_value = value
            return


def grey_material(name, value):
    mat = bpy.data.materials.new(name)
    mat.use_nodes = True
    bsdf = next(n for n in mat.node_tree.nodes if n.type == "BSDF_PRINCIPLED")
    bsdf.inputs["Base Color"].default_value = (value, value, value, 1.0)
    set_input(bsdf, ("Roughness",), 1.0)
    set_input(bsdf, ("Specular", "Specular IOR Level"), 0.0)
    return mat


def setup_scene(obj, args):
    """Material, floor, world light, key light, camera rig; returns the turntable pivot."""
    scene = bpy.context.scene
    me = obj.data
    attr = colour_attribute(me)
    me.materials.clear()
    if attr is not None:
        me.materials.append(vertex_colour_material(attr.name))
    else:
        me.materials.append(grey_material("clipsculpt_no_colour", 0.6))
    obj.pass_index = OBJECT_INDEX

    pts = world_vertices(obj)
    lo = Vector([min(p[k] for p in pts) for k in range(3)])
    hi = Vector([max(p[k] for p in pts) for k in range(3)])
    centre = (lo + hi) / 2
    radius = max((p - centre).length for p in pts)

    # Neutral floor under the object.
    bpy.ops.mesh.primitive_plane_add(size=radius * 200, location=(centre.x, centre.y, lo.z))
    floor = bpy.context.active_object
    floor.name = "floor"
    floor.data.materials.append(grey_material("clipsculpt_floor", 0.5))

    # Soft light: a uniform white sky plus one large area light from the front left. Balanced so that the mean
    # rendered colour of a matte object stays within about 0.04 (sRGB) of its mean vertex colour (measured in
    # Blender 3.4 on toy runs of a red cylinder, red cube, blue cone and blue sphere).
    world = bpy.data.worlds.new("clipsculpt_world")
    scene.world = world
    world.use_nodes = True
    bg = world.node_tree.nodes["Background"]
    bg.inputs["Color"].default_value = (1.0, 1.0, 1.0, 1.0)
    bg.inputs["Strength"].default_value = 0.75
    key_data = bpy.data.lights.new("key", type="AREA")
    key_data.size = radius * 4
    key_data.energy = 300.0 * radius * radius
    key = bpy.data.objects.new("key", key_data)
    scene.collection.objects.link(key)
    key.location = centre + Vector((-2.0, -3.0, 4.0)) * radius
    key.rotation_euler = (centre - key.location).to_track_quat("-Z", "Y").to_euler()

    # Camera on a pivot at the object's centre: the turntable turns the pivot, the object stays put.
    pivot = bpy.data.objects.new("turntable", None)
    scene.collection.objects.link(pivot)
    pivot.location = centre
    cam_data = bpy.data.cameras.new("camera")
    cam_data.lens = 50.0
    cam = bpy.data.objects.new("camera", cam_data)
    scene.collection.objects.link(cam)
    cam.parent = pivot
    fov = 2 * math.atan(cam_data.sensor_width / (2 * cam_data.lens))
    dist = radius / math.sin(fov / 2) * 1.3
    elev, azim = math.radians(28.0), math.radians(-60.0)
    offset = Vector((math.cos(elev) * math.cos(azim), math.cos(elev) * math.sin(azim), math.sin(elev))) * dist
    cam.location = offset
    cam.rotation_euler = (-offset).to_track_quat("-Z", "Y").to_euler()
    cam_data.clip_start = dist / 100
    cam_data.clip_end = dist * 100
    scene.camera = cam
    return pivot


def setup_render(args):
    scene = bpy.context.scene
    r = scene.render
    try:
        r.engine = ENGINES[args.engine]
    except TypeError:
        # Blender 4.2 to 4.x call EEVEE "BLENDER_EEVEE_NEXT".
        r.engine = ENGINES[args.engine] + "_NEXT"
    r.resolution_x = r.resolution_y = args.size
    r.resolution_percentage = 100
    r.image_settings.file_format = "PNG"
    r.image_settings.color_mode = "RGB"
    r.image_settings.color_depth = "8"
    r.film_transparent = False
    # Standard, not Filmic/AgX: a pixel is the sRGB encoding of the linear radiance, so colours read true.
    scene.view_settings.view_transform = "Standard"
    scene.view_settings.look = "None"
    scene.view_settings.exposure = 0.0
    scene.view_settings.gamma = 1.0
    if args.engine == "cycles":
        scene.cycles.device = "CPU"
        scene.cycles.samples = args.samples
        scene.cycles.use_denoising = False  # Debian's build has no OpenImageDenoise
        scene.cycles.max_bounces = 4
        if hasattr(scene.cycles, "use_adaptive_sampling"):
            scene.cycles.use_adaptive_sampling = False
    elif args.engine == "eevee":
        scene.eevee.taa_render_samples = args.samples
    else:
        shading = scene.display.shading
        shading.light = "STUDIO"
        shading.color_type = "VERTEX"
        shading.show_shadows = True


def render_mask(mask_path):
    """Writes the object mask (white = object) of the current view: one Cycles sample, object index pass,
    compositor ID mask. Works whatever engine made the image (EEVEE and Workbench have no index pass in 3.4)."""
    scene = bpy.context.scene
    r = scene.render
    saved = (r.engine, r.filepath, scene.cycles.samples)
    r.engine = "CYCLES"
    scene.cycles.samples = 1
    scene.cycles.use_denoising = False  # Debian's build has no OpenImageDenoise
    bpy.context.view_layer.use_pass_object_index = True
    scene.use_nodes = True
    tree = scene.node_tree
    tree.nodes.clear()
    rl = tree.nodes.new("CompositorNodeRLayers")
    idm = tree.nodes.new("CompositorNodeIDMask")
    idm.index = OBJECT_INDEX
    idm.use_antialiasing = False
    tree.links.new(rl.outputs["IndexOB"], idm.inputs["ID value"])
    comp = tree.nodes.new("CompositorNodeComposite")
    tree.links.new(idm.outputs["Alpha"], comp.inputs["Image"])
    r.image_settings.color_mode = "BW"
    r.filepath = mask_path
    bpy.ops.render.render(write_still=True)
    r.image_settings.color_mode = "RGB"
    scene.use_nodes = False
    r.engine, r.filepath, scene.cycles.samples = saved


def render_still(path):
    scene = bpy.context.scene
    scene.frame_set(1)
    scene.render.filepath = path
    bpy.ops.render.render(write_still=True)


def render_turntable(pivot, frames, frames_dir):
    scene = bpy.context.scene
    os.makedirs(frames_dir, exist_ok=True)
    paths = []
    for i in range(frames):
        pivot.rotation_euler = (0.0, 0.0, 2 * math.pi * i / frames)
        scene.render.filepath = os.path.join(frames_dir, "frame_%04d.png" % i)
        bpy.ops.render.render(write_still=True)
        paths.append(scene.render.filepath)
    return paths


def contact_sheet(paths, out_path):
    """Grid of the frames (as square as possible, first frame top left) in one PNG, pixels copied as stored."""
    imgs = [bpy.data.images.load(p) for p in paths]
    w, h = imgs[0].size
    cols = math.ceil(math.sqrt(len(imgs)))
    rows = math.ceil(len(imgs) / cols)
    sheet = [1.0] * (cols * w * rows * h * 4)
    row_len = cols * w * 4
    for k, img in enumerate(imgs):
        px = [0.0] * (w * h * 4)
        img.pixels.foreach_get(px)
        # Blender's image rows run bottom to top.
        c, r = k % cols, rows - 1 - k // cols
        for y in range(h):
            start = (r * h + y) * row_len + c * w * 4
            sheet[start:start + w * 4] = px[y * w * 4:(y + 1) * w * 4]
        bpy.data.images.remove(img)
    out = bpy.data.images.new("contact_sheet", cols * w, rows * h, alpha=False)
    out.pixels.foreach_set(sheet)
    out.filepath_raw = out_path
    out.file_format = "PNG"
    out.save()


def main():
    args = parse_args(sys.argv)
    mesh_path = find_mesh(args.input)
    if args.out is None:
        if os.path.isdir(args.input):
            args.out = os.path.join(args.input, "blender_preview.png")
        else:
            args.out = os.path.splitext(mesh_path)[0] + "_blender.png"
    bpy.ops.wm.read_factory_settings(use_empty=True)
    t0 = time.time()
    obj, importer = import_mesh(os.path.abspath(mesh_path))
    stats = {"blender": bpy.app.version_string, "mesh": mesh_stats(obj, importer, mesh_path)}
    stats["import_seconds"] = time.time() - t0
    if not args.no_render:
        pivot = setup_scene(obj, args)
        setup_render(args)
        t1 = time.time()
        if args.frames > 0:
            frames_dir = args.frames_dir or os.path.join(os.path.dirname(os.path.abspath(args.out)), "blender_frames")
            paths = render_turntable(pivot, args.frames, frames_dir)
            contact_sheet(paths, args.out)
            pivot.rotation_euler = (0.0, 0.0, 0.0)
        else:
            render_still(args.out)
        if args.mask:
            render_mask(args.mask)
        stats["render"] = {
            "engine": bpy.context.scene.render.engine,
            "size": args.size,
            "samples": args.samples,
            "frames": args.frames,
            "seconds": time.time() - t1,
            "out": args.out,
        }
    if args.blend:
        bpy.ops.wm.save_as_mainfile(filepath=os.path.abspath(args.blend), check_existing=False)
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump(stats, f, indent=1)
    print("clipsculpt preview: wrote " + (args.out if not args.no_render else (args.stats or "nothing")))


if __name__ == "__main__":
    main()
