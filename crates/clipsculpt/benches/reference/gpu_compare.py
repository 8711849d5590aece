"""The table of gpu-compare.sh (also reads stages.sh's output), and generate's report as JSON lines.

    python3 gpu_compare.py table < LOG       one markdown table from `round N {json}` lines
    python3 gpu_compare.py time FILE CMD...  runs CMD, writes "SECONDS PEAK_RSS_KIB" to FILE
    python3 gpu_compare.py report RUN_DIR S KIB DEVICE PREFIX
                                             the PREFIX-{latent,mesh,total} lines of a `generate` run
                                             (report.json; S, KIB: the process's wall seconds
                                             and peak RSS from /usr/bin/time)

Table: per stage, the fastest seconds of each side over the rounds (min of each line's
`min_seconds`), clipsculpt / PyTorch (below 1: clipsculpt is faster), the peak memory of each
side (the device's high-water mark where both report one, else the process's peak RSS; the
largest over the rounds) and its ratio. Only the standard library: it runs with any python3.
"""

import json
import re
import resource
import subprocess
import sys
import time

LINE = re.compile(r"^round (\d+) (\{.*\})\s*$")
# generate's report.json seconds that make up the mesh export (besides `files`, the writes).
MESH_STAGES = ("mesh_grid", "mesh_surface", "mesh_colours")


def read(lines):
    """{stage: {impl: [records]}} in first-seen stage order, and the other lines (the header)."""
    stages, other = {}, []
    for line in lines:
        m = LINE.match(line)
        if not m:
            other.append(line.rstrip("\n"))
            continue
        r = json.loads(m.group(2))
        stages.setdefault(r["stage"], {}).setdefault(r["impl"], []).append(r)
    return stages, other


def fastest(records):
    """The fastest seconds over the rounds (matmul: the sum of its shapes' best times)."""
    return min(r.get("min_seconds", sum(r["seconds"])) for r in records)


def peak(records, key):
    values = [r.get(key) for r in records]
    return None if any(v is None for v in values) else max(values)


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else ""


def fmt(v, digits=3):
    return "" if v is None else f"{v:.{digits}f}"


def note(stage, cs, pt):
    """What a row's figures need said beside them."""
    if stage == "matmul":
        gf = lambda r: "/".join(f"{g:.0f}" for g in r[0]["gflops"])  # noqa: E731
        return f"GFLOP/s per shape: clipsculpt {gf(cs)}, PyTorch {gf(pt)}"
    parts = [f"{k} {cs[-1][k]} vs {pt[-1][k]}" for k in ("vertices", "guided_steps") if k in cs[-1] and k in pt[-1]]
    parts += [cs[-1]["note"]] if "note" in cs[-1] else []
    return "; ".join(parts)


def row(stage, sides):
    cs, pt = sides.get("clipsculpt"), sides.get("pytorch")
    if not cs or not pt:
        have = ", ".join(sides)
        return f"| {stage} | | | | | | | | only {have} ran |"
    c, p = fastest(cs), fastest(pt)
    key = "peak_device_mib" if peak(cs, "peak_device_mib") and peak(pt, "peak_device_mib") else "peak_rss_mib"
    cm, pm = peak(cs, key), peak(pt, key)
    kind = "device" if key == "peak_device_mib" else "RSS"
    dev = f'{cs[-1].get("device", "cpu")} {cs[-1].get("dtype", "f32")}'
    mem = "" if cm is None and pm is None else kind
    return (f"| {stage} | {dev} | {fmt(c)} | {fmt(p)} | {ratio(c, p)} | {fmt(cm, 0)} | {fmt(pm, 0)} "
            f"| {ratio(cm, pm)} {mem} | {note(stage, cs, pt)} |")


def table(lines):
    stages, other = read(lines)
    out = [line for line in other if line and not line.startswith("load average")]
    rounds = max((len(v) for s in stages.values() for v in s.values()), default=0)
    out += ["", f"Fastest of {rounds} round(s); ratios clipsculpt / PyTorch, as the README's tables "
            "give them (below 1: clipsculpt is faster or smaller).", "",
            "| stage | device dtype | clipsculpt s | PyTorch s | ratio | clipsculpt peak MiB "
            "| PyTorch peak MiB | ratio (meter) | note |",
            "|---|---|---|---|---|---|---|---|---|"]
    out += [row(stage, sides) for stage, sides in stages.items()]
    return "\n".join(out)


def report(run_dir, wall, kib, device, prefix):
    """generate's report.json as the PREFIX-* lines (pipeline, guided) of the clipsculpt side."""
    r = json.load(open(f"{run_dir}/report.json"))
    sec, mem, s = r["seconds"], r["memory"], r["settings"]
    on_gpu = mem.get("meter") == "cuda_pool"
    mib = lambda stage: (mem["peak_bytes"].get(stage) or 0) / 2**20 if on_gpu else None  # noqa: E731
    base = {"impl": "clipsculpt", "device": device, "dtype": mem.get("dtype"), "peak_rss_mib": int(kib) / 1024,
            "steps": s.get("prior_steps"), "guidance_scale": s.get("guidance_scale"), "grid": s.get("grid"),
            "guided_steps": len((r.get("sampling") or {}).get("steps") or [])}
    files = sum((sec.get("files") or {}).values())
    mesh = sum(v for k, v in sec.items() if k in MESH_STAGES) + files
    extra = {k: round(v, 2) for k, v in sec.items()
             if isinstance(v, float) and v >= 0.005 and k not in MESH_STAGES + ("loading", "sampling", "total")}
    lines = [
        dict(base, stage=f"{prefix}-latent", seconds=[sec["sampling"]], min_seconds=sec["sampling"],
             peak_device_mib=mib("sampling")),
        dict(base, stage=f"{prefix}-mesh", seconds=[mesh], min_seconds=mesh,
             peak_device_mib=mib("export"), vertices=r["mesh"]["vertices"]),
        dict(base, stage=f"{prefix}-total", seconds=[sec["total"]], min_seconds=sec["total"],
             peak_device_mib=max(filter(None, [mib(k) for k in mem["peak_bytes"]]), default=None),
             wall_seconds=float(wall), note="generate also: " + ", ".join(f"{k} {v} s" for k, v in extra.items())),
    ]
    return "\n".join(json.dumps(line) for line in lines)


def timed(path, cmd):
    """Runs cmd; writes its wall seconds and peak RSS (KiB) to path; its exit code."""
    start = time.perf_counter()
    rc = subprocess.call(cmd)
    secs = time.perf_counter() - start
    with open(path, "w") as f:
        f.write(f"{secs:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\n")
    return rc


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "time":
        sys.exit(timed(sys.argv[2], sys.argv[3:]))
    if len(sys.argv) >= 2 and sys.argv[1] == "table":
        print(table(sys.stdin))
    elif len(sys.argv) == 7 and sys.argv[1] == "report":
        print(report(*sys.argv[2:]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
