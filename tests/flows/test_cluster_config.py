"""[cluster] by import path (the prefect-dask convention): validated, built, scaled and always closed."""

from __future__ import annotations

import tomllib

import pytest

from dpstream.flows.assembly.cluster import check_cluster, preparation_client, run_client
from dpstream.flows.config.cluster import ClusterConfig
from tests.flows import cluster_probe
from tests.flows.test_flows import write_config
from tests.pipelines.conftest import local_put, write_lake

PROBE = "tests.flows.cluster_probe.ProbeCluster"
LOCAL = {"n_workers": 1, "threads_per_worker": 1, "processes": True, "dashboard_address": ":0"}


def section(text: str) -> ClusterConfig:
    config = ClusterConfig(**tomllib.loads(text)["cluster"])
    check_cluster(config)  # the class, checked as the config loads
    return config


def test_a_cluster_class_section_parses_and_bad_ones_name_the_fix():
    config = section(
        f'[cluster]\nclass = "{PROBE}"\nkwargs = {{ n_workers = 1 }}\nadapt = {{ minimum = 1, maximum = 3 }}\n'
    )
    assert config.cluster_class == PROBE and config.kwargs == {"n_workers": 1} and config.adapt.maximum == 3
    cases = {
        '[cluster]\nclass = "dask_gateway.GatewayCluster"': "module 'dask_gateway' is not installed.*pip install dask-gateway",
        f'[cluster]\nclass = "{PROBE}"\naddress = "tcp://h:8786"': "both name the cluster; keep one",
        f'[cluster]\nclass = "{PROBE}"\nn_workers = 4': "n_workers sets up the default LocalCluster",
        "[cluster]\nkwargs = { n_workers = 1 }": "cluster.kwargs needs cluster.class",
        f'[cluster]\nclass = "{PROBE}"\nadapt = {{ minimum = 3, maximum = 2 }}': "adapt.minimum=3 exceeds",
        '[cluster]\nclass = "LocalCluster"': "dotted import path",
    }
    for text, message in cases.items():
        with pytest.raises(ValueError, match=message):
            section(text)


def test_spec_cluster_from_a_config_runs_work_and_is_closed():
    config = section(
        '[cluster]\nclass = "distributed.SpecCluster"\n'
        '[cluster.kwargs.scheduler]\ncls = "distributed.Scheduler"\noptions = { dashboard_address = ":0" }\n'
        '[cluster.kwargs.workers.w0]\ncls = "distributed.Nanny"\noptions = { nthreads = 1 }\n'
    )
    with run_client(config) as client:
        assert client.submit(sum, [1, 2, 3]).result() == 6
        assert len(client.scheduler_info()["workers"]) == 1
        cluster = client.cluster
    assert cluster.status.name == "closed"


def test_where_validation_and_the_shuffle_run():
    assert section("[cluster]\nn_workers = 2").prepares_on_workers  # a LocalCluster: this user's processes
    assert not section('[cluster]\naddress = "tcp://127.0.0.1:8786"').prepares_on_workers
    assert not section(
        f'[cluster]\nclass = "{PROBE}"'
    ).prepares_on_workers  # workers may read only the shuffle
    assert section(f'[cluster]\nclass = "{PROBE}"\nprepare_on = "workers"').prepares_on_workers
    assert not section('[cluster]\nprepare_on = "flow"').prepares_on_workers
    with preparation_client(section('[cluster]\nprepare_on = "flow"')) as client:
        assert client is None  # no cluster started
    with pytest.raises(ValueError, match="prepare_on"):
        section('[cluster]\nprepare_on = "driver"')


@pytest.mark.usefixtures("prefect_api")
@pytest.mark.parametrize("prepare_on", [None, "workers"])
@pytest.mark.parametrize("fail", [False, True])
def test_the_train_flow_builds_scales_and_closes_the_configured_cluster(
    tmp_path, monkeypatch, fail, prepare_on
):
    from dpstream.flows import flows

    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    config = write_config(tmp_path, raw, algorithm="ssp")
    text = config.read_text().replace("learning_rate = 0.5", "").replace("n_workers = 1\n", "")
    kwargs = ", ".join(f"{k} = {v!r}".replace("True", "true").replace("'", '"') for k, v in LOCAL.items())
    config.write_text(
        text.replace(
            "[cluster]\n",
            f'[cluster]\nclass = "{PROBE}"\nkwargs = {{ {kwargs} }}\nadapt = {{ minimum = 1, maximum = 2 }}\n'
            + (f'prepare_on = "{prepare_on}"\n' if prepare_on else ""),
        )
    )
    if fail:

        def broken(*args, **kwargs):
            raise RuntimeError("a worker-side failure in the middle of the run")

        monkeypatch.setattr(flows, "train_on_lake", broken)
    before = len(cluster_probe.INSTANCES)
    if fail:
        with pytest.raises(RuntimeError, match="middle of the run"):
            flows.train_flow(str(config), run_id="r-fail", output_dir=str(tmp_path / "out"))
    else:
        result = flows.train_flow(str(config), run_id="r-ok", output_dir=str(tmp_path / "out"))
        assert result["params"].shape == (6,)
    started = cluster_probe.INSTANCES[before:]
    # One per training attempt (each retry gets a fresh cluster), and one for validation and the shuffle
    # when they run on the workers (by default they run in the flow's process with a cluster class).
    assert len(started) == (3 if fail else 1) + (prepare_on == "workers")
    for cluster in started:
        assert cluster.adapted == {"minimum": 1, "maximum": 2}
        assert cluster.closed and cluster.status.name == "closed"  # no worker outlives the run
