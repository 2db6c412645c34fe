"""The train flow builds its run plan once, in the plan task, and hands that same object down: the data
plane and the coordinator check it and never call the algorithm's ``plan`` again."""

from __future__ import annotations

import pytest

from tests.flows.test_flows import write_config
from tests.pipelines.conftest import local_put, write_lake


@pytest.mark.usefixtures("prefect_api")
def test_the_train_flow_builds_one_plan_and_trains_that_plan(tmp_path, monkeypatch):
    from dpstream.algorithms import DPAMBSSGD
    from dpstream.flows import flows
    from dpstream.run_plan import RunPlan

    built, trained, planned_steps = [], [], []
    build = RunPlan.build.__func__

    def counting_build(cls, *args, **kwargs):
        built.append(build(cls, *args, **kwargs))
        return built[-1]

    original_plan, original_train = DPAMBSSGD.plan, flows.train_on_lake

    def counting_plan(self, num_rows, num_params):
        planned_steps.append((num_rows, num_params))
        return original_plan(self, num_rows, num_params)

    def recording_train(manifest, run_plan, *args, **kwargs):
        trained.append(run_plan)
        return original_train(manifest, run_plan, *args, **kwargs)

    monkeypatch.setattr(RunPlan, "build", classmethod(counting_build))
    monkeypatch.setattr(DPAMBSSGD, "plan", counting_plan)
    monkeypatch.setattr(flows, "train_on_lake", recording_train)
    raw = tmp_path / "raw"
    write_lake(local_put, str(raw))
    config = write_config(tmp_path, raw)  # DP-AMBSSGD, scatter mode on one worker
    result = flows.train_flow(str(config), run_id="once", output_dir=str(tmp_path / "out"))
    assert len(built) == 1 and len(planned_steps) == 1
    assert len(trained) == 1 and trained[0] is built[0]
    assert result["report"].mu == pytest.approx(built[0].mu)
    assert built[0].checkpoint is not None and built[0].checkpoint.url.endswith("_checkpoints")
