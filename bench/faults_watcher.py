"""The watcher fault of the campaign (:mod:`bench.faults`, ``--long``): ``devicestate watch``
killed (SIGKILL, by PID) while it publishes a re-LIST, against the real kube-apiserver of
``devtools/testenv``.

On its own topics, consumer group and schema: the campaign plays kubelet through the admin
identity (``pods`` bound to nodes, two GPUs each, ``pods/status`` with
``allocatedResourcesStatus``; a seeded 5 % of the GPUs ``Unhealthy``). Then watcher 1 lists and
publishes everything and the worker applies it; watcher 1 is killed; watcher 2 lists again (the
re-LIST) and is killed 0-20 ms after its LIST of Pods came back, while it publishes the listed
Pods (the round's note says how much of the re-LIST reached the topic, and ``killed_mid_list``
whether the kill came before its end); watcher 3 lists again to the end. The checks are the
campaign's: every observation ``(node, resourceID, Pod resourceVersion)`` has exactly one
``device_history`` row although each was published two or three times, the quarantines are the
Unhealthy GPUs', and both replays find no difference.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

from bench.console import console
from bench.faults_inject import Worker, module_argv
from bench.faults_input import ObservationKey, Round
from bench.faults_run import Campaign, RoundResult
from bench.kafka_admin import create_topic, end_offsets
from bench.processes import Child, start_child
from bench.stack import Run, cleanup, new_run, run_settings
from bench.worker_stage import worker_env
from devtools.stack.supervisor import StackLayout
from services.runtime.config import Settings

GPU = "nvidia.com/gpu"
NAMESPACE = "faults"


async def _cluster(kubeconfig: Path, pods: int, nodes: int, seed: int) -> Round:
    """Create the Pods and their status; returns what they imply (observations, quarantines)."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    rng = random.Random(seed)
    health = {
        (p, c): "Unhealthy" if rng.random() < 0.05 else "Healthy" for p in range(pods) for c in "ab"
    }
    async with client.ApiClient(configuration) as api:
        core = client.CoreV1Api(api)
        await core.create_namespace({"metadata": {"name": NAMESPACE}})

        async def one(p: int) -> None:
            name, node = f"fault-pod-{p:05d}", f"fault-node-{p % nodes:04d}"
            containers = [
                {"name": c, "image": "cuda", "resources": {"limits": {GPU: "1"}}} for c in "ab"
            ]
            body = {
                "metadata": {"name": name},
                "spec": {"nodeName": node, "containers": containers},
            }
            await core.create_namespaced_pod(NAMESPACE, body)
            statuses = [
                {
                    "name": c, "image": "cuda", "imageID": "", "ready": True, "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-11-30T00:00:00Z"}},
                    "allocatedResourcesStatus": [
                        {"name": GPU, "resources": [{"resourceID": f"GPU-{p:05d}-{c}", "health": health[(p, c)]}]}
                    ],
                }
                for c in "ab"
            ]  # fmt: skip
            status = {"status": {"phase": "Running", "containerStatuses": statuses}}
            await core.patch_namespaced_pod_status(name, NAMESPACE, status)

        for start in range(0, pods, 25):
            await asyncio.gather(*(one(p) for p in range(start, min(pods, start + 25))))
        listed = await core.list_namespaced_pod(NAMESPACE)
    observations: set[ObservationKey] = set()
    quarantines: dict[str, tuple[str, str]] = {}
    for pod in listed.items:
        p, version = int(pod.metadata.name.rsplit("-", 1)[1]), int(pod.metadata.resource_version)
        for c in "ab":
            key = (pod.spec.node_name, f"GPU-{p:05d}-{c}", version)
            observations.add(key)
            if health[(p, c)] == "Unhealthy":
                quarantines[f"{key[0]}/{key[1]}@{version}"] = (key[0], key[1])
    return Round([], len(observations), observations, quarantines)


class WatcherFault:
    """One run of the watcher fault; :meth:`run` returns its :class:`RoundResult`."""

    def __init__(
        self, base: Settings, limits: dict[str, str], *, pods: int, batch_size: int, seed: int
    ) -> None:
        self.base, self.limits, self.pods, self.seed = base, limits, pods, seed
        self.batch_size = batch_size

    def _watcher(self, run: Run, env: dict[str, str]) -> Child:
        child = start_child("watcher", module_argv("watch"), env, run.log_dir)
        run.children.append(child)
        return child

    async def run(self) -> RoundResult:
        from sqlalchemy.ext.asyncio import create_async_engine

        from devtools.testenv import kubeapi

        run = new_run(None)
        settings = run_settings(self.base, run, 6)
        result = RoundResult(0, "watcher-kill", self.pods * 2)
        engine = create_async_engine(settings.database_url, pool_pre_ping=True)
        api: Any = None
        try:
            await create_topic(settings)
            run.created_topic = True
            run.created_schemas.append(run.worker_schema)
            api = await asyncio.to_thread(
                kubeapi.start, run.log_dir.parent / "kube", lambda _: None
            )
            round_ = await _cluster(api.kubeconfig_admin, self.pods, 50, self.seed)
            env = {**worker_env(run, settings, 0, self.batch_size), **self.limits}
            worker = Worker(run, env)
            worker.start()
            run.done.add("worker")
            watch_env = {
                **worker.env,
                "DEVICESTATE_KUBECONFIG": str(api.kubeconfig_admin),
                "DEVICESTATE_TICK_INTERVAL_SECONDS": "1",
                "DEVICESTATE_WATCHER_METRICS_PORT": "0",
                "DEVICESTATE_WATCH_LEASES": "false",
            }
            campaign = Campaign(run, settings, worker, engine, StackLayout.from_env(), self.seed)
            first = self._watcher(run, watch_env)
            await self._until_published(settings, first, 0, len(round_.observations))
            await self._applied(campaign)
            os.kill(first.pid, signal.SIGKILL)
            first.process.wait(30)
            base = sum(
                (await end_offsets(settings.kafka_bootstrap_servers, settings.topic)).values()
            )
            log_size = (run.log_dir / "watcher.log").stat().st_size
            second = self._watcher(run, watch_env)
            began = time.monotonic()
            await self._until_listed(second, log_size, random.Random(self.seed).uniform(0, 0.02))
            os.kill(second.pid, signal.SIGKILL)
            second.process.wait(30)
            published = (
                sum((await end_offsets(settings.kafka_bootstrap_servers, settings.topic)).values())
                - base
            )
            result.at_share = round(published / len(round_.observations), 3)
            result.notes.append(
                f"watcher 2 killed after {published} of {len(round_.observations)} observations "
                f"of its re-LIST (killed_mid_list={published < len(round_.observations)})"
            )
            third = self._watcher(run, watch_env)
            base = sum(
                (await end_offsets(settings.kafka_bootstrap_servers, settings.topic)).values()
            )
            await self._until_published(settings, third, base, len(round_.observations))
            await asyncio.sleep(2)  # ticks count as published records too: let the LIST end
            third.stop()
            await self._applied(campaign)
            result.caught_up_seconds = round(time.monotonic() - began, 2)
            await campaign.check(0, round_, result)
            worker.stop()
        except (TimeoutError, RuntimeError) as exc:
            result.error = f"watcher fault: {exc}"
        finally:
            await engine.dispose()
            await cleanup(run, settings, keep=False)
            if api is not None:
                await asyncio.to_thread(kubeapi.stop, api, lambda _: None)
        console.print(
            f"  watcher-kill (re-LIST) {'[red]FAIL[/red]' if result.failed else '[green]ok[/green]'}: "
            f"lost {result.lost}, doubled {result.doubled}, quarantines {result.quarantines}/"
            f"{result.expected_quarantines}, replay diff {result.replay_differences}/"
            f"{result.governance_differences}; {'; '.join(result.notes)}"
        )
        return result

    async def _until_listed(self, watcher: Child, offset: int, delay: float) -> None:
        """Until ``watcher`` logged (after byte ``offset`` of its log) that its LIST of Pods came
        back (it publishes the listed Pods' events next), then ``delay`` seconds more."""
        deadline = time.monotonic() + 120
        while True:
            watcher.check()
            with watcher.log_path.open("rb") as log:
                log.seek(offset)
                if b'"listed pods"' in log.read():
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("the watcher did not list the Pods in 120 s")
            await asyncio.sleep(0.002)
        await asyncio.sleep(delay)

    async def _until_published(
        self, settings: Settings, watcher: Child, base: int, count: int
    ) -> int:
        """Until the topic holds ``count`` records more than ``base`` (ticks count too)."""
        deadline = time.monotonic() + 300
        while True:
            watcher.check()
            ends = await end_offsets(settings.kafka_bootstrap_servers, settings.topic)
            if sum(ends.values()) - base >= count:
                return sum(ends.values()) - base
            if time.monotonic() > deadline:
                raise TimeoutError(f"the watcher did not publish {count} records in 300 s")
            await asyncio.sleep(0.01)

    async def _applied(self, campaign: Campaign) -> None:
        """Until the worker applied what the topic holds now and the governor folded it."""
        ends = await end_offsets(campaign.settings.kafka_bootstrap_servers, campaign.settings.topic)
        campaign.ends = {p: end - 1 for p, end in ends.items() if end > 0}
        await campaign.caught_up(time.monotonic())
