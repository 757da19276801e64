"""``openrlhf.utils.agent.SingleTurnAgentExecutor`` with OpenRLHF's constructor signature."""

from __future__ import annotations

from rlhf.agents.errors import AgentError
from rlhf.agents.single_turn import SingleTurnAgentExecutor as _SingleTurn


class SingleTurnAgentExecutor(_SingleTurn):
    """rlhf's single-turn executor; OpenRLHF's ``remote_rm_url`` argument is refused with the setting to use."""

    def __init__(self, remote_rm_url: str | list[str] | None = None) -> None:
        if remote_rm_url:
            raise AgentError(
                f"SingleTurnAgentExecutor(remote_rm_url={remote_rm_url!r}): here the reward comes from the config, "
                "not the executor; set reward.function=FILE.py or reward.urls=[URL] and construct it with no argument"
            )
