#!/usr/bin/env python3
"""Benchmark (not a test): fp32 against bf16, post-training INT8 (the best calibration
method, and `calibrate --auto`) and quantisation-aware training (all-INT8), on the demo
task's tiny DANet or on the trained DANet-R18.

    source "$(bash scripts/setup.sh)"          # $SEGTOOL_PYTHON: onnxruntime, openvino, cv2
    cargo build --bin segtool                  # (or --release; --segtool PATH)
    make demo                                  # out/demo: the trained tiny DANet and its data
    $SEGTOOL_PYTHON bench/qat_table.py [--demo out/demo] [--work target/bench-qat]
        [--qat-iterations 300] [--qat-lr 0.001] [--threads 2] [--sizes 96 512] [--rounds 5]
    python3 bench/build_r18.py                 # the trained DANet-R18 (cached; ~40 min on 2 cores)
    $SEGTOOL_PYTHON bench/qat_table.py --model r18 [--work target/bench-qat-r18]

--model demo: the demo's tiny DANet (`segtool demo`: 2000 iterations on the shapes task,
96x96 images), `danet_tiny.safetensors`; the data its folder (images/ and masks/, train
and val). --model r18: the DANet-R18 bench/build_r18.py built (its built.json under
$SEGTOOL_HOME/bench), on a folder of the same shapes stream it trained on (`segtool
generate`: 4000 training and 100 validation images at its size); its QAT fine-tunes with
the builder's own run configuration. Every row is a file `segtool export` (default target)
or `segtool calibrate` writes, in the `ort-cpu` layout (ONNX Runtime's CPU kernels: uint8
activations):
  * fp32: the export;
  * fp32, OpenVINO bf16: the same file with OpenVINO's bf16 precision for float layers
    (OpenVINO only: ONNX Runtime's CPU kernels have no bf16);
  * PTQ: `segtool calibrate --per-channel` with each method (minmax, entropy, percentile,
    mse) on the first --calib training images; the row is the best by mIoU (all are
    listed in the JSON);
  * PTQ --auto: `calibrate --auto --max-miou-drop 0.3` with --labels, judged in ONNX
    Runtime on --auto-val training images (not the val split the table scores);
  * QAT, one row per --qat-layouts (ort-cpu and openvino): `segtool train --qat LAYOUT`
    from the model's checkpoint for --qat-iterations (ranges initialised by the best PTQ
    method on --calib training images, EMA, BN frozen half way), then `segtool export` of
    its checkpoint (all-INT8, no images); and the file against the model that was
    trained: `segtool eval --predictions` of the QAT checkpoint (tch's fake-quant model,
    eval mode) against the file's labels in each engine;
  * fp32 fine-tuned (control): the same schedule without quantisation, exported in
    float: what the extra training alone gives (the demo model is not converged).
mIoU: over the whole val split, intersection and union accumulated over
the split, mean over the classes present (as segtool's eval), each file run by ONNX
Runtime (CPU) and by OpenVINO (CPU, f32 hint for float layers). Speed: `segtool bench
--engine ort|openvino --threads T --size SxS`, batch 1, the engine's median ms (pre- and
post-processing excluded); --rounds rounds over all the files in turn, the median of the
rounds' medians (the machine may be shared). Agreement: the share of val pixels whose label
equals the fp32 file's in ONNX Runtime (the model a user would otherwise run), per engine;
"x ORT fp32": ONNX Runtime fp32's median ms over the row's, per engine. Prints a markdown
table; everything goes to --work/qat_table.json.
"""
import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ["minmax", "entropy", "percentile", "mse"]
LAYOUT = "ort-cpu"


def find_segtool(explicit):
    if explicit:
        return explicit
    for profile in ("release", "debug"):
        p = os.path.join(ROOT, "target", profile, "segtool")
        if os.path.exists(p):
            return p
    sys.exit("segtool binary not found: cargo build --bin segtool, or pass --segtool")


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return {k: k in flags for k in ("avx512_vnni", "avx_vnni", "avx512_bf16",
                                                 "amx_int8")}
    return {}


def run(cmd, log):
    t = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        tail = open(log).read().strip().splitlines()[-8:]
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n  " + "\n  ".join(tail))
    return time.perf_counter() - t


def spec_of(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    return json.loads({p.key: p.value for p in m.metadata_props}["segtool.spec"])


def load_split(data, split, spec):
    import cv2
    xs, ys = [], []
    for path in sorted(glob.glob(os.path.join(data, "images", split, "*.png"))):
        rgb = cv2.cvtColor(cv2.imread(path, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        x = rgb.astype(np.float32) / 255.0
        x = (x - np.asarray(spec["mean"], np.float32)) / np.asarray(spec["std"], np.float32)
        xs.append(x.transpose(2, 0, 1)[None].astype(np.float32))
        mask = os.path.join(data, "masks", split, os.path.basename(path))
        ys.append(cv2.imread(mask, cv2.IMREAD_UNCHANGED))
    return xs, ys


def load_predictions(folder, data):
    """`segtool eval --predictions`'s class maps, in the val images' order."""
    import cv2
    names = sorted(os.listdir(os.path.join(data, "images", "val")))
    return [cv2.imread(os.path.join(folder, n), cv2.IMREAD_UNCHANGED).astype(np.uint8)
            for n in names]


def miou(preds, masks, classes):
    """segtool's mIoU: confusion over the split (255 ignored), IoU of each class with a
    union, their mean."""
    conf = np.zeros((classes, classes), np.int64)
    for p, m in zip(preds, masks):
        keep = m != 255
        conf += np.bincount(m[keep].astype(np.int64) * classes + p[keep],
                            minlength=classes * classes).reshape(classes, classes)
    inter = np.diag(conf).astype(np.float64)
    union = conf.sum(0) + conf.sum(1) - np.diag(conf)
    ious = inter[union > 0] / union[union > 0]
    return float(ious.mean()) if len(ious) else 0.0


def predictions(path, engine, xs, threads, precision="f32"):
    if engine == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        run_one = lambda x: sess.run(None, {name: x})[0]
    else:
        import openvino as ov
        compiled = ov.Core().compile_model(path, "CPU", {
            "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": precision})
        req = compiled.create_infer_request()
        run_one = lambda x: req.infer({0: x})[0]
    return [run_one(x)[0].argmax(axis=0).astype(np.uint8) for x in xs]


def bench_ms(segtool, path, engine, threads, size, iterations, work, precision="f32"):
    out = os.path.join(work, "bench.json")
    cmd = [segtool, "bench", "--model", path, "--engine", engine, "--threads", str(threads),
           "--size", f"{size}x{size}", "--iterations", str(iterations), "--warmup", "5",
           "--strict", "--json", out]
    if precision != "f32":
        cmd += ["--precision", precision]
    run(cmd, os.path.join(work, "bench.log"))
    return json.load(open(out))["results"][0]["engine_ms"]["median"]


def link_subset(files, dst_images, dst_masks, data):
    for d in (dst_images, dst_masks):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    for f in files:
        name = os.path.basename(f)
        os.symlink(f, os.path.join(dst_images, name))
        os.symlink(os.path.join(data, "masks", "train", name), os.path.join(dst_masks, name))


def r18_built():
    """The newest DANet-R18 bench/build_r18.py finished (its built.json)."""
    home = os.environ.get("SEGTOOL_HOME", os.path.join(os.path.expanduser("~"), ".cache",
                                                       "segtool"))
    found = sorted(glob.glob(os.path.join(home, "bench", "danet-r18-shapes-fine-*",
                                          "built.json")), key=os.path.getmtime)
    if not found:
        sys.exit(f"no built DANet-R18 under {home}/bench: run python3 bench/build_r18.py")
    return json.load(open(found[-1]))


def model_and_data(a, segtool, w):
    """(checkpoint, data folder, QAT run configuration, description) of --model."""
    if a.model == "demo":
        ckpt = os.path.join(a.demo, "danet_tiny.safetensors")
        if not os.path.exists(ckpt):
            sys.exit(f"{ckpt} missing: run `make demo` (or `segtool demo --out {a.demo}`)")
        return ckpt, os.path.join(a.demo, "data"), "shapes-tiny", "demo tiny DANet"
    built = r18_built()
    data = w("data")
    if not os.path.exists(os.path.join(data, "classes.json")):
        run([segtool, "generate", "--out", data, "--size", str(built["size"]),
             "--train-count", "4000", "--val-count", "100"], w("generate.log"))
    return (built["checkpoint"], data, built["config"],
            f"DANet-R18 (bench/build_r18.py, val mIoU {100 * built['val_miou']:.1f} in training)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="demo", choices=["demo", "r18"])
    ap.add_argument("--demo", default=os.path.join(ROOT, "out", "demo"))
    ap.add_argument("--work")
    ap.add_argument("--segtool")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calib", type=int, default=64, help="calibration images (train split)")
    ap.add_argument("--auto-val", type=int, default=100,
                    help="--auto's validation images (the train split's last ones)")
    ap.add_argument("--qat-iterations", type=int, default=300)
    ap.add_argument("--qat-lr", type=float, default=0.001)
    ap.add_argument("--qat-ranges", default="ema", choices=["ema", "lsq"])
    ap.add_argument("--qat-layouts", nargs="+", default=[LAYOUT, "openvino"],
                    choices=["portable", "ort-cpu", "openvino"],
                    help="a QAT run (and row) per layout")
    ap.add_argument("--sizes", type=int, nargs="+",
                    help="bench sizes (demo: 96 512; r18: 256)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=50, help="timed runs per bench call")
    ap.add_argument("--reuse", action="store_true", help="keep files already in --work")
    a = ap.parse_args()
    a.work = a.work or os.path.join(ROOT, "target", "bench-qat" if a.model == "demo"
                                    else "bench-qat-r18")
    a.sizes = a.sizes or ([96, 512] if a.model == "demo" else [256])
    segtool = find_segtool(a.segtool)
    os.makedirs(a.work, exist_ok=True)
    w = lambda *p: os.path.join(a.work, *p)
    ckpt, data, qat_config, described = model_and_data(a, segtool, w)
    res = {"cpu": cpu_name(), "cpu_flags": cpu_flags(), "threads": a.threads,
           "segtool": segtool, "args": vars(a), "model": described, "rows": {},
           "seconds": {}}

    fp32 = w("fp32.onnx")
    if not (a.reuse and os.path.exists(fp32)):
        run([segtool, "export", "--checkpoint", ckpt, "--onnx", fp32], w("export.log"))
    spec = spec_of(fp32)
    classes = len(spec["classes"])
    val_x, val_y = load_split(data, "val", spec)
    train_images = sorted(glob.glob(os.path.join(data, "images", "train", "*.png")))
    calib_dir, auto_dir = w("calib"), w("autoval")
    link_subset(train_images[:a.calib], w("calib"), w("calib_masks"), data)
    link_subset(train_images[-a.auto_val:], w("autoval", "images"), w("autoval", "masks"),
                data)
    reference, labels = {}, {}

    def score(path, precision="f32", engines=("ort", "openvino")):
        """mIoU per engine, and agreement with ONNX Runtime fp32's labels."""
        out = {"miou": {}, "agreement": {}}
        for e in engines:
            preds = predictions(path, e, val_x, a.threads, precision)
            labels[(path, e, precision)] = preds
            if not reference:
                reference["labels"] = preds
            out["miou"][e] = miou(preds, val_y, classes)
            out["agreement"][e] = float(np.mean([np.mean(p == r) for p, r in
                                                 zip(preds, reference["labels"])]))
        return out

    rows = res["rows"]
    rows["fp32"] = {"path": fp32, **score(fp32)}
    print(f"fp32: mIoU {rows['fp32']['miou']}", flush=True)
    rows["fp32, OpenVINO bf16"] = {"path": fp32, "precision": "bf16",
                                   **score(fp32, "bf16", engines=("openvino",))}
    print(f"fp32, OpenVINO bf16: {rows['fp32, OpenVINO bf16']}", flush=True)

    # PTQ, each method; the best by ONNX Runtime's mIoU.
    ptq = {}
    for m in METHODS:
        out = w(f"ptq_{m}.onnx")
        if not (a.reuse and os.path.exists(out)):
            res["seconds"][f"ptq_{m}"] = run(
                [segtool, "calibrate", "--model", fp32, "--images", calib_dir, "--samples",
                 str(a.calib), "--method", m, "--per-channel", "--layout", LAYOUT, "-o", out,
                 "--quiet", "--latency-runs", "0", "--threads", str(a.threads)],
                w(f"ptq_{m}.log"))
        ptq[m] = {"path": out, **score(out)}
        print(f"PTQ {m}: mIoU {ptq[m]['miou']}", flush=True)
    best = max(METHODS, key=lambda m: ptq[m]["miou"]["ort"])
    res["ptq_all"] = ptq
    rows[f"PTQ ({best})"] = ptq[best]

    # PTQ --auto: the mix that keeps the mIoU within 0.3 points of fp32 on its own
    # validation images.
    auto = w("ptq_auto.onnx")
    if not (a.reuse and os.path.exists(auto)):
        res["seconds"]["ptq_auto"] = run(
            [segtool, "calibrate", "--model", fp32, "--images", calib_dir, "--samples",
             str(a.calib), "--method", best, "--per-channel", "--layout", LAYOUT, "-o", auto,
             "--auto", "--max-miou-drop", "0.3", "--labels", w("autoval", "masks"),
             "--val-images", w("autoval", "images"), "--engine", "ort", "--accept-miss",
             "--threads", str(a.threads), "--quiet"],
            w("ptq_auto.log"))
    report = auto.replace(".onnx", ".auto.json")
    auto_info = {}
    if os.path.exists(report):
        r = json.load(open(report))
        kept = next((x for x in r.get("rows", []) if x.get("chosen")), None)
        auto_info = {"verdict": r.get("verdict"),
                     "float_layers": kept.get("float_layers") if kept else None}
    rows["PTQ --auto"] = {"path": auto, **score(auto), "auto": auto_info}
    print(f"PTQ --auto: mIoU {rows['PTQ --auto']['miou']} {auto_info}", flush=True)

    # QAT from the trained checkpoint, all-INT8, once per layout; then the file is the
    # trained model: tch's fake-quant model (`segtool eval` of the QAT checkpoint, eval
    # mode) against the INT8 file in each engine, label for label.
    qat_rows = []
    for layout in a.qat_layouts:
        tag = "" if layout == LAYOUT else f"_{layout}"
        qat_dir = w(f"qat_run{tag}")
        qat_ckpt = os.path.join(qat_dir, "last.safetensors")
        qat = w(f"qat{tag}.int8.onnx")
        if not (a.reuse and os.path.exists(qat)):
            shutil.rmtree(qat_dir, ignore_errors=True)
            sets = [f"out_dir={qat_dir}", f"data.dataset={data}", f"model.init={ckpt}",
                    f"optim.iterations={a.qat_iterations}", f"optim.lr={a.qat_lr}",
                    f"quant.method={best}", f"quant.calib_images={a.calib}",
                    f"quant.ranges={a.qat_ranges}",
                    f"quant.freeze_bn_at={a.qat_iterations // 2}", "eval.every=0",
                    "checkpoint.every=0", "log.every=25", "log.tensorboard=false"]
            cmd = [segtool, "train", "--config", qat_config, "--threads", str(a.threads),
                   "--qat", layout]
            for s in sets:
                cmd += ["--set", s]
            res["seconds"][f"qat_train{tag}"] = run(cmd, w(f"qat_train{tag}.log"))
            run([segtool, "export", "--checkpoint", qat_ckpt, "--onnx", qat],
                w(f"qat_export{tag}.log"))
        name = f"QAT (all-INT8, {layout})"
        qat_rows.append(name)
        row = rows[name] = {"path": qat, **score(qat), "layout": layout,
                            "iterations": a.qat_iterations, "lr": a.qat_lr,
                            "ranges": a.qat_ranges, "init_method": best,
                            "log_tail": open(w(f"qat_train{tag}.log")).read().strip()
                            .splitlines()[-6:]}
        tch_dir = w(f"qat_tch_predictions{tag}")
        shutil.rmtree(tch_dir, ignore_errors=True)
        run([segtool, "eval", "--checkpoint", qat_ckpt, "--data", data, "--split", "val",
             "--mode", "whole", "--predictions", tch_dir, "--metrics", w(f"qat_tch{tag}.json"),
             "--threads", str(a.threads)], w(f"qat_tch_eval{tag}.log"))
        tch = load_predictions(tch_dir, data)
        row["tch_miou"] = json.load(open(w(f"qat_tch{tag}.json")))["mean_iou"]
        row["tch_agreement"] = {
            e: float(np.mean([np.mean(t == f) for t, f in zip(tch, labels[(qat, e, "f32")])]))
            for e in ("ort", "openvino")}
        print(f"{name}: mIoU {row['miou']}; against tch's fake-quant model "
              f"{row['tch_agreement']} (tch mIoU {row['tch_miou']})", flush=True)

    # The control: the same fine-tuning schedule in float. QAT fine-tunes a model that
    # is still learning (the demo's 2000 iterations are not converged), so part of its
    # mIoU over fp32 is the extra training, not the quantisation.
    ft_dir = w("float_ft_run")
    ft = w("float_ft.onnx")
    if not (a.reuse and os.path.exists(ft)):
        shutil.rmtree(ft_dir, ignore_errors=True)
        sets = [f"out_dir={ft_dir}", f"data.dataset={data}", f"model.init={ckpt}",
                f"optim.iterations={a.qat_iterations}", f"optim.lr={a.qat_lr}",
                "eval.every=0", "checkpoint.every=0", "log.every=25",
                "log.tensorboard=false"]
        cmd = [segtool, "train", "--config", qat_config, "--threads", str(a.threads)]
        for s in sets:
            cmd += ["--set", s]
        res["seconds"]["float_ft_train"] = run(cmd, w("float_ft_train.log"))
        run([segtool, "export", "--checkpoint", os.path.join(ft_dir, "last.safetensors"),
             "--onnx", ft], w("float_ft_export.log"))
    rows["fp32 fine-tuned (control)"] = {"path": ft, **score(ft),
                                         "iterations": a.qat_iterations, "lr": a.qat_lr}
    print(f"fp32 fine-tuned: mIoU {rows['fp32 fine-tuned (control)']['miou']}", flush=True)

    # Speed: rounds over all files in turn, per engine and size.
    for size in a.sizes:
        for engine in ("ort", "openvino"):
            timed = [k for k in rows if engine in rows[k]["miou"]]
            samples = {k: [] for k in timed}
            for _ in range(a.rounds):
                for k in timed:
                    samples[k].append(bench_ms(segtool, rows[k]["path"], engine, a.threads,
                                               size, a.iterations, a.work,
                                               rows[k].get("precision", "f32")))
            for k in timed:
                rows[k].setdefault("ms", {})[f"{engine}_{size}"] = float(np.median(samples[k]))
                rows[k].setdefault("ms_rounds", {})[f"{engine}_{size}"] = samples[k]

    json.dump(res, open(w("qat_table.json"), "w"), indent=1)
    fp = rows["fp32"]
    print(f"\n{res['cpu']} ({', '.join(k for k, v in res['cpu_flags'].items() if v)}), "
          f"{a.threads} threads; {described}, val split ({len(val_x)} images, "
          f"{val_x[0].shape[3]}x{val_x[0].shape[2]}); QAT {a.qat_iterations} iterations, "
          f"lr {a.qat_lr}, {a.qat_ranges} ranges from {best}\n")
    head = ("| model | mIoU ORT | mIoU OpenVINO | vs fp32 (ORT, points) "
            "| agreement ORT | agreement OpenVINO |")
    sep = "| --- | --- | --- | --- | --- | --- |"
    for size in a.sizes:
        head += f" ORT ms {size}² | OpenVINO ms {size}² | x ORT fp32 {size}² (ORT / OpenVINO) |"
        sep += " --- | --- | --- |"
    print(head)
    print(sep)
    cell = lambda d, e, f: f(d[e]) if e in d else "-"
    pct = lambda v: f"{100 * v:.2f}"
    for k, row in rows.items():
        m, agree, ms = row["miou"], row["agreement"], row["ms"]
        line = (f"| {k} | {cell(m, 'ort', pct)} | {cell(m, 'openvino', pct)} | "
                + (f"{100 * (m['ort'] - fp['miou']['ort']):+.2f}" if "ort" in m else "-")
                + f" | {cell(agree, 'ort', pct)} | {cell(agree, 'openvino', pct)} |")
        for size in a.sizes:
            base = fp["ms"][f"ort_{size}"]
            ort_ms, ov_ms = ms.get(f"ort_{size}"), ms.get(f"openvino_{size}")
            fmt = lambda v: "-" if v is None else f"{v:.2f}"
            ratio = lambda v: "-" if v is None else f"{base / v:.2f}x"
            line += f" {fmt(ort_ms)} | {fmt(ov_ms)} | {ratio(ort_ms)} / {ratio(ov_ms)} |"
        print(line)
    print("\nPTQ by method (mIoU ORT): " + ", ".join(
        f"{m} {100 * ptq[m]['miou']['ort']:.2f}" for m in METHODS))
    if auto_info:
        print(f"--auto: {auto_info}")
    for name in qat_rows:
        q = rows[name]
        print(f"{name} file against tch's fake-quant model (segtool eval, mIoU "
              f"{100 * q['tch_miou']:.2f}): labels equal on "
              f"{100 * q['tch_agreement']['ort']:.3f}% (ONNX Runtime), "
              f"{100 * q['tch_agreement']['openvino']:.3f}% (OpenVINO)")
    print(f"wrote {w('qat_table.json')}")


if __name__ == "__main__":
    main()
