"""clipsculpt for Blender: a panel in the 3D view's sidebar (N ▸ clipsculpt) that runs the installed
`clipsculpt` binary on a prompt in the background and imports the GLB it writes.

No model is loaded into Blender: the binary does all the work in its own process, and Blender only reads its
stderr for progress (a modal timer) and imports the result. Installed by `clipsculpt blender-addon --install`
(or Edit ▸ Preferences ▸ Add-ons ▸ Install… with the zip `clipsculpt blender-addon` writes).

Blender 3.4 to 4.x. Debian's Blender 3.4 imports no glTF with NumPy ≥ 1.24 (its importer uses `numpy.bool`,
removed there); the import restores that alias first, as clipsculpt's preview script does.
"""

import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time

import bpy

bl_info = {
    "name": "clipsculpt",
    "author": "clipsculpt",
    "version": (0, 1, 0),
    "blender": (3, 4, 0),
    "location": "View3D > Sidebar > clipsculpt",
    "description": "Text prompt to a coloured mesh with the clipsculpt binary, imported as glTF",
    "category": "Import-Export",
}

GUIDE_MODES = [
    ("sampling", "Guided sampling", "CLIP guidance inside the prior's sampler (the default)"),
    ("latent", "Latent", "Optimize the finished latent"),
    ("both", "Both", "Guided sampling, then the latent stage"),
    ("end-to-end", "End to end", "Optimize the conditioning of the sampler's last steps"),
    ("off", "Off", "Plain Shap-E, no guidance"),
]
# Options that a clipsculpt binary may not have yet: the run is repeated without them when it rejects them.
OPTIONAL_FLAGS = ("--faces", "--texture")


def find_binary(context):
    """The clipsculpt executable: the add-on preference, else `clipsculpt` on PATH."""
    prefs = context.preferences.addons[__name__].preferences
    path = bpy.path.abspath(prefs.binary) if prefs.binary else shutil.which("clipsculpt")
    if not path or not os.path.isfile(path):
        return None
    return path


def out_dir(settings):
    """The run's output folder: the chosen folder, else one per prompt and seed in the temporary folder."""
    slug = re.sub(r"[^a-z0-9]+", "-", settings.prompt.lower()).strip("-")[:60] or "run"
    base = bpy.path.abspath(settings.output_dir) if settings.output_dir else os.path.join(
        tempfile.gettempdir(), "clipsculpt")
    return os.path.join(base, f"{slug}-{settings.seed}")


def command(exe, settings, out, optional=True):
    """The clipsculpt command line for `settings`; `optional` adds --faces/--texture when they are set."""
    cmd = [exe, "generate", settings.prompt, "--seed", str(settings.seed), "--guide", settings.guide,
           "--formats", "glb", "--out", out, "--overwrite"]
    if optional and settings.faces > 0:
        cmd += ["--faces", str(settings.faces)]
    if optional and settings.texture > 0:
        cmd += ["--texture", str(settings.texture)]
    return cmd


def child_env():
    """clipsculpt's environment, with its stage lines (debug level) on stderr."""
    env = dict(os.environ)
    env["RUST_LOG"] = "info,clipsculpt=debug"
    return env


def rejected_optional(returncode, stderr):
    """Whether the binary refused an option it does not have (--faces, --texture)."""
    return returncode == 2 and "unexpected argument" in stderr and any(f in stderr for f in OPTIONAL_FLAGS)


def last_error(stderr):
    """The line of clipsculpt's stderr that says what went wrong."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error")]
    return (errors or lines or ["clipsculpt failed"])[-1]


def allow_numpy_bool():
    """Blender 3.4's glTF importer uses numpy.bool, which NumPy 1.24 removed: restore the alias."""
    try:
        import numpy

        if "bool" not in numpy.__dict__:
            numpy.bool = bool
    except ImportError:
        pass


def colour_material(obj):
    """A material that shows `obj`'s colour attribute, for a GLB without one."""
    mesh = obj.data
    attrs = getattr(mesh, "color_attributes", None) or getattr(mesh, "vertex_colors", None)
    if not attrs:
        return
    mat = bpy.data.materials.new(obj.name + "_colour")
    mat.use_nodes = True
    nodes = mat.node_tree.nodes
    bsdf = nodes.get("Principled BSDF")
    attr = nodes.new("ShaderNodeVertexColor")
    attr.layer_name = attrs[0].name
    mat.node_tree.links.new(attr.outputs["Color"], bsdf.inputs["Base Color"])
    bsdf.inputs["Roughness"].default_value = 0.8
    mesh.materials.append(mat)


def import_glb(path, name):
    """Imports the GLB at `path`; returns the new mesh objects, named after the prompt."""
    allow_numpy_bool()
    before = set(bpy.data.objects)
    result = bpy.ops.import_scene.gltf(filepath=path)
    if "FINISHED" not in result:
        raise RuntimeError(f"the glTF importer could not read {path}")
    meshes = [o for o in bpy.data.objects if o not in before and o.type == "MESH"]
    for obj in meshes:
        obj.name = name
        if not obj.data.materials:
            colour_material(obj)
    return meshes


class ClipsculptPreferences(bpy.types.AddonPreferences):
    bl_idname = __name__

    binary: bpy.props.StringProperty(
        name="clipsculpt binary", subtype="FILE_PATH",
        description="The clipsculpt executable (empty: `clipsculpt` on PATH)")

    def draw(self, context):
        self.layout.prop(self, "binary")


class ClipsculptSettings(bpy.types.PropertyGroup):
    prompt: bpy.props.StringProperty(name="Prompt", default="a red cube")
    seed: bpy.props.IntProperty(name="Seed", default=0, min=0)
    guide: bpy.props.EnumProperty(name="Guidance", items=GUIDE_MODES, default="sampling")
    faces: bpy.props.IntProperty(name="Faces", default=0, min=0,
                                 description="About this many triangles (0: clipsculpt's default)")
    texture: bpy.props.IntProperty(name="Texture size", default=0, min=0, max=8192,
                                   description="Bake a texture of this side (0: vertex colours)")
    output_dir: bpy.props.StringProperty(name="Output", subtype="DIR_PATH",
                                         description="Folder of the runs (empty: the temporary folder)")
    status: bpy.props.StringProperty(name="Status", default="")


class CLIPSCULPT_OT_generate(bpy.types.Operator):
    """Run clipsculpt on the prompt in the background and import the mesh it makes"""

    bl_idname = "clipsculpt.generate"
    bl_label = "Generate"

    wait: bpy.props.BoolProperty(
        default=False, options={"HIDDEN", "SKIP_SAVE"},
        description="Run in the foreground and return when done (scripts; always so in background mode)")

    _proc = None
    _timer = None
    _lines = None
    _started = 0.0
    _optional = True
    # One run at a time (a class attribute, not saved in the .blend).
    busy = False

    @classmethod
    def poll(cls, context):
        return bool(context.scene.clipsculpt.prompt.strip()) and not CLIPSCULPT_OT_generate.busy

    def prepare(self, context):
        s = context.scene.clipsculpt
        exe = find_binary(context)
        if exe is None:
            self.report({"ERROR"}, "clipsculpt not found: set its path in the add-on's preferences")
            return None
        out = out_dir(s)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        return exe, out

    def finish(self, context, out):
        s = context.scene.clipsculpt
        glb = os.path.join(out, "mesh.glb")
        if not os.path.isfile(glb):
            s.status = f"no mesh in {out}"
            self.report({"ERROR"}, s.status)
            return {"CANCELLED"}
        meshes = import_glb(glb, s.prompt)
        s.status = f"imported {len(meshes)} object(s) from {glb}"
        self.report({"INFO"}, s.status)
        return {"FINISHED"}

    def execute(self, context):
        # Background mode has no event loop for a modal timer: run in the foreground.
        if not (self.wait or bpy.app.background):
            return self.invoke(context, None)
        found = self.prepare(context)
        if found is None:
            return {"CANCELLED"}
        exe, out = found
        s = context.scene.clipsculpt
        run = subprocess.run(command(exe, s, out), capture_output=True, text=True, env=child_env())
        if rejected_optional(run.returncode, run.stderr):
            self.report({"WARNING"}, "this clipsculpt has no --faces/--texture: ran without them")
            run = subprocess.run(command(exe, s, out, optional=False), capture_output=True, text=True,
                                 env=child_env())
        if run.returncode not in (0, 1):
            s.status = last_error(run.stderr)
            self.report({"ERROR"}, s.status)
            return {"CANCELLED"}
        return self.finish(context, out)

    def invoke(self, context, event):
        if bpy.app.background or self.wait:
            return self.execute(context)
        found = self.prepare(context)
        if found is None:
            return {"CANCELLED"}
        self._exe, self._out = found
        self._optional = True
        self.start(context)
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.25, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def start(self, context):
        s = context.scene.clipsculpt
        cmd = command(self._exe, s, self._out, self._optional)
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                      env=child_env())
        self._lines = queue.Queue()
        self._stderr = []
        self._pump = threading.Thread(target=self.pump, args=(self._proc.stderr, self._lines), daemon=True)
        self._pump.start()
        self._started = time.monotonic()
        CLIPSCULPT_OT_generate.busy = True
        s.status = "starting clipsculpt"

    @staticmethod
    def pump(stream, lines):
        for line in stream:
            lines.put(line)

    def modal(self, context, event):
        s = context.scene.clipsculpt
        if event.type == "ESC":
            self._proc.terminate()
            return self.stop(context, "stopped", {"CANCELLED"})
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        code = self._proc.poll()
        if code is not None:
            self._pump.join(timeout=2)
        while not self._lines.empty():
            line = self._lines.get()
            self._stderr.append(line)
            stage = re.search(r"stage: (.*)", line)
            if stage:
                s.status = stage.group(1).strip()
        elapsed = time.monotonic() - self._started
        context.workspace.status_text_set(f"clipsculpt: {s.status} ({elapsed:.0f} s, Esc stops)")
        for area in context.screen.areas:
            area.tag_redraw()
        if code is None:
            return {"RUNNING_MODAL"}
        self._proc.stderr.close()
        stderr = "".join(self._stderr)
        if self._optional and rejected_optional(code, stderr):
            self.report({"WARNING"}, "this clipsculpt has no --faces/--texture: running without them")
            self._optional = False
            self.start(context)
            return {"RUNNING_MODAL"}
        if code not in (0, 1):
            return self.stop(context, last_error(stderr), {"CANCELLED"}, "ERROR")
        result = self.finish(context, self._out)
        return self.stop(context, s.status, result)

    def stop(self, context, status, result, level="INFO"):
        s = context.scene.clipsculpt
        context.window_manager.event_timer_remove(self._timer)
        context.workspace.status_text_set(None)
        CLIPSCULPT_OT_generate.busy = False
        s.status = status
        if level == "ERROR":
            self.report({"ERROR"}, status)
        return result


class VIEW3D_PT_clipsculpt(bpy.types.Panel):
    bl_label = "clipsculpt"
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = "clipsculpt"

    def draw(self, context):
        s = context.scene.clipsculpt
        col = self.layout.column()
        for name in ("prompt", "seed", "guide", "faces", "texture", "output_dir"):
            col.prop(s, name)
        col.operator(CLIPSCULPT_OT_generate.bl_idname, icon="MESH_MONKEY")
        if s.status:
            col.label(text=s.status)


CLASSES = (ClipsculptPreferences, ClipsculptSettings, CLIPSCULPT_OT_generate, VIEW3D_PT_clipsculpt)


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Scene.clipsculpt = bpy.props.PointerProperty(type=ClipsculptSettings)


def unregister():
    del bpy.types.Scene.clipsculpt
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
