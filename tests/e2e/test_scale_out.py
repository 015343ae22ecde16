"""User story: with agents routing steps to several samplers, each step is still sampled exactly once."""

from __future__ import annotations

from collections import defaultdict

from tests.e2e.conftest import StartCollector
from tests.e2e.harness import StandIn, records_of_file, wait_for
from tests.e2e.steps import assert_destination, by_step, emit_steps

# Twelve steps, so that both samplers almost surely own some (routing hashes run and step).
PLAN = {step: {"trainer": 8 + step % 5, "rollouter": 3 + step % 4} for step in range(1, 13)}


def test_agent_routes_each_step_to_one_sampler(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """All records of a step meet at one sampler, which closes it as complete; destinations see it once."""
    sampler_env = {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
        "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
        "VALGEN_DECISION_WAIT": "60s",
    }
    samplers = [start_collector(f"sampler-{i}", ["collector.yaml", "sampler.yaml"], sampler_env) for i in range(2)]
    hosts = ", ".join(s.grpc_endpoint for s in samplers)
    agent = start_collector("agent", ["agent.yaml"], {"VALGEN_SAMPLER_HOSTS": f"[{hosts}]"})

    expected = emit_steps(f"http://{agent.http_endpoint}", True, PLAN)
    wait_for(lambda: len(by_step(wandb_stand_in.records())[1]) == len(PLAN), 30, "a summary of every step")
    wait_for(lambda: len(by_step(loki_stand_in.records())[1]) == len(PLAN), 30, "every step in Loki")
    assert_destination("wandb", wandb_stand_in.records(), expected, PLAN)
    assert_destination("loki", loki_stand_in.records(), expected, PLAN)

    owner: dict[int, set[str]] = defaultdict(set)
    for sampler in samplers:
        wait_for(lambda s=sampler: records_of_file(s.file_path) != [], 10, f"{sampler.name} file")
        kept, summaries = by_step(records_of_file(sampler.file_path))
        for step in {*kept, *summaries}:
            owner[step].add(sampler.name)
    assert all(len(names) == 1 for names in owner.values()), dict(owner)
    assert {name for names in owner.values() for name in names} == {s.name for s in samplers}


def test_agent_with_the_dns_resolver_routes_to_the_samplers_the_name_resolves_to(
    start_collector: StartCollector, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """agent.yaml + agent-dns.yaml: the agent resolves VALGEN_SAMPLER_SERVICE and every step reaches a sampler.

    On loopback the name (localhost) resolves to one address, so one sampler gets every step; a
    headless Service resolves to every sampler (docs/deployment.md, Kubernetes).
    """
    sampler_env = {
        "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
        "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
        "VALGEN_DECISION_WAIT": "60s",
    }
    sampler = start_collector("sampler", ["collector.yaml", "sampler.yaml"], sampler_env)
    port = sampler.grpc_endpoint.rsplit(":", 1)[1]
    agent_env = {"VALGEN_SAMPLER_SERVICE": "localhost", "VALGEN_SAMPLER_PORT": port}
    agent = start_collector("agent", ["agent.yaml", "agent-dns.yaml"], agent_env)
    plan = {step: PLAN[step] for step in (1, 2, 3)}

    expected = emit_steps(f"http://{agent.http_endpoint}", True, plan)
    wait_for(lambda: len(by_step(wandb_stand_in.records())[1]) == len(plan), 30, "a summary of every step")
    assert_destination("wandb", wandb_stand_in.records(), expected, plan)
