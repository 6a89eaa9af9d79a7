"""No drift between the deployment files and the code: settings, CLI, ports, paths, config file, versions."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from rocksidecar.app import config
from rocksidecar.app.cli import build_parser
from rocksidecar.retry.policy import RetryPolicy
from tests.deploy import chart, dockerfile
from tests.deploy.paths import CHART, DOCKERFILE, REPO
from tests.tls_certs import Certs

KNOWN_ENV = {s.env for s in config.SETTINGS} | {config.CONFIG_ENV}
_, STAGES = dockerfile.parse(DOCKERFILE)
RUNTIME = STAGES[-1]
HEALTH_PATHS = {"/healthz", "/readyz"}  # issue 5's contract: process alive, ready


def _default_port(name: str) -> int:
    return int(next(s.default for s in config.SETTINGS if s.name == name).rpartition(":")[2])


def _all_pod_specs(parent_chart: Path) -> list[dict[str, Any]]:
    specs = [chart.pod_spec(chart.render(v)) for v in chart.VARIANTS]
    return [*specs, chart.one(chart.template(chart=parent_chart), "StatefulSet")["spec"]["template"]["spec"]]


def test_every_rocksidecar_env_var_set_anywhere_is_a_known_setting(parent_chart: Path) -> None:
    set_by_chart = {
        name
        for spec in _all_pod_specs(parent_chart)
        for container in chart.containers(spec).values()
        for name in chart.env_of(container)
        if name.startswith(config.ENV_PREFIX)
    }
    set_by_image = {k for k in RUNTIME.env() if k.startswith(config.ENV_PREFIX)}
    assert set_by_chart and set_by_image
    assert set_by_chart <= KNOWN_ENV, set_by_chart - KNOWN_ENV
    assert set_by_image <= KNOWN_ENV, set_by_image - KNOWN_ENV


def test_command_and_args_parse_with_the_real_cli() -> None:
    entrypoint = dockerfile.exec_form(RUNTIME.one("ENTRYPOINT"))
    image_args = build_parser().parse_args(dockerfile.exec_form(RUNTIME.one("CMD")))
    assert image_args.command == "serve"
    for variant in chart.VARIANTS:
        sidecar = chart.sidecar(chart.render(variant))
        assert sidecar["command"] == entrypoint, "the chart must run the image's entrypoint"
        parsed = build_parser().parse_args(sidecar["args"])
        assert parsed.command == "serve" and not parsed.devbroker and callable(parsed.func)


@pytest.mark.parametrize("variant", chart.VARIANTS)
def test_sidecar_env_and_config_file_load_with_app_config(variant: str, tmp_path: Path, certs: Certs) -> None:
    docs = chart.render(variant)
    sidecar = chart.sidecar(docs)
    # Secrets are resolved by the kubelet; stand in for them with a value of the right shape, and for the
    # files of a mounted TLS Secret with certificates of the right kind.
    env = {
        k: v if isinstance(v, str) else f"from-secret-{k.lower()}" for k, v in chart.env_of(sidecar).items()
    }
    files = {"ca.crt": certs.ca, "tls.crt": certs.client_cert, "tls.key": certs.client_key}
    for name in ("ROCKSIDECAR_TLS_CA_FILE", "ROCKSIDECAR_TLS_CERT_FILE", "ROCKSIDECAR_TLS_KEY_FILE"):
        if name in env:
            assert Path(env[name]).parent == Path("/etc/rocksidecar/tls"), name
            env[name] = str(files[Path(env[name]).name])
    config_file = tmp_path / Path(env[config.CONFIG_ENV]).name
    config_file.write_text(chart.one(docs, "ConfigMap", "rocksidecar")["data"][config_file.name])
    settings = config.load(env, config_file, require_namesrv=True)
    assert settings.http_addr.startswith("127.0.0.1:") and settings.grpc_addr.startswith("127.0.0.1:")
    assert settings.data_dir == "/var/lib/rocksidecar" == dockerfile.exec_form(RUNTIME.one("VOLUME"))[0]
    if variant == "default":
        assert settings.retry_default == RetryPolicy(), "values.yaml spells out the code's ladder"
    if variant == "classic-sidecar":
        assert settings.shutdown_grace_s == 45.5 and settings.retry_policy("payments").max_retries == 20
        assert settings.topics == ("orders", "payments") and settings.dead_letter_webhook.startswith(
            "http://"
        )
        assert [(s.name, s.group, s.orderly) for s in settings.subscriptions] == [
            ("orders", "orders-app", False),
            ("audit", "audit-app", True),
        ]


def test_default_ports_are_the_service_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["sidecar"]["httpPort"] == _default_port("http_addr")
    assert values["sidecar"]["grpcPort"] == _default_port("grpc_addr")
    assert values["metrics"]["port"] not in {_default_port("http_addr"), _default_port("grpc_addr")}
    env = chart.env_of(chart.sidecar(chart.render("default")))
    defaults = {s.env: s.default for s in config.SETTINGS}
    for name in ("ROCKSIDECAR_HTTP_ADDR", "ROCKSIDECAR_GRPC_ADDR"):
        assert env[name] == defaults[name], "the chart binds where the service binds by default"


def test_probe_paths_and_scripts_match_the_image() -> None:
    sidecar = chart.sidecar(chart.render("default"))
    probe_paths = {
        sidecar[p]["exec"]["command"][2] for p in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probe_paths == HEALTH_PATHS
    libexec = next(c for c in RUNTIME.all("COPY") if c.endswith("/libexec/")).split()
    installed = {libexec[-1] + Path(src).name for src in libexec[:-1]}
    proxy = chart.containers(chart.pod_spec(chart.render("servicemonitor")))["rocksidecar-metrics"]
    assert sidecar["startupProbe"]["exec"]["command"][1] in installed
    assert proxy["command"][1] in installed


def test_schema_offers_exactly_the_settings_the_chart_does_not_set_itself() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    offered = set(schema["properties"]["config"]["propertyNames"]["enum"]) - {"retry", *config.SECTIONS}
    env = {name for v in ("auth", "tls") for name in chart.env_of(chart.sidecar(chart.render(v)))}
    set_by_chart = {s.name for s in config.SETTINGS if s.env in env}
    every = {s.name for s in config.SETTINGS}
    # with dmq.enabled (the tls variant) the chart sets dmq_inner_topic from dmq.innerTopic and refuses it
    # in config (test_chart_settings_agree); without, config names the topic of a Rock-DMQ run elsewhere
    only_with_dmq = {"dmq_inner_topic"}
    assert offered.isdisjoint(set_by_chart - only_with_dmq), offered & set_by_chart
    missing = sorted(every - offered - set_by_chart)
    assert not missing, f"add to values.schema.json config.propertyNames (and a type): {missing}"
    assert offered <= every, f"not settings of app.config: {sorted(offered - every)}"


def test_schema_types_match_the_setting_defaults() -> None:
    types = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]["properties"]
    json_type = {bool: "boolean", int: "integer", float: "number", str: "string", tuple: ["array", "string"]}
    for setting in config.SETTINGS:
        if setting.name in types:
            assert types[setting.name]["type"] == json_type[type(setting.default)], setting.name


def test_image_tag_is_the_chart_app_version_and_the_project_version() -> None:
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert values["image"]["tag"] == chart_yaml["appVersion"] == project["version"]
