"""Where a memory database lives: the node chosen when it is created, recorded by the queue.

A database's StoreActor, the reader beside it and every read of its files run on one node, its
*data node*. The node is chosen once, when the database is first used (by an agent's client, or by
a job that names it), and the queue records the choice durably; later requests get the recorded
placement. A placement names the node in one of three ways:

- ``node``: the value of the node's ``omray-node`` Ray label (``ray start --labels
  '{"omray-node": "gpu-box"}'``). It survives a restart of the node (Ray gives the restarted node
  a new id, the label stays), so a data node that returns with the same disk gets its databases back;
- ``resource``: a Ray custom resource only the data node has (``ray start --resources
  '{"omray_data": 1}'``);
- ``node_id``: a Ray node id, for a node without a label (it does not survive a restart of that node).

The agent's node is the default: its label when it has one, else its id. Settings can ask for a
named node (``storage.node``) or a resource (``storage.node_resource``) instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

from protocol.errors import ConflictError, OmrayError, SettingsError

NODE_LABEL: Final = "omray-node"
"""The Ray node label that names a data node."""

NODE_NAME_PATTERN: Final = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
"""What a node name (a label value) or a resource name may be: Ray's label value rules."""

_NAME: Final = re.compile(NODE_NAME_PATTERN)


def valid_node_name(value: object) -> bool:
    """True when ``value`` can name a node or a custom resource."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


class DataPlacement(BaseModel):
    """The node of one memory database: exactly one of ``node``, ``resource`` and ``node_id``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str | None = Field(default=None, pattern=NODE_NAME_PATTERN)
    """The data node's ``omray-node`` label."""
    resource: str | None = Field(default=None, pattern=NODE_NAME_PATTERN)
    """A Ray custom resource only the data node has."""
    node_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{8,128}$")
    """The data node's Ray node id (a node without a label)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> DataPlacement:
        if sum(value is not None for value in (self.node, self.resource, self.node_id)) != 1:
            raise ValueError("a placement names exactly one of node, resource and node_id")
        return self

    def describe(self) -> str:
        """``node 'a'``, ``resource 'omray_data'`` or ``node id 1f62afe6…`` (for messages)."""
        if self.node is not None:
            return f"node {self.node!r}"
        if self.resource is not None:
            return f"resource {self.resource!r}"
        return f"node id {str(self.node_id)[:12]}"


class AgentNode(BaseModel):
    """The node a request comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_id: str = Field(pattern=r"^[0-9a-f]{8,128}$")
    """Its Ray node id."""
    label: str | None = Field(default=None, pattern=NODE_NAME_PATTERN)
    """Its ``omray-node`` label, if it has one."""

    def placement(self) -> DataPlacement:
        """This node as a placement: by label when it has one (it survives a restart), else by id."""
        return DataPlacement(node=self.label) if self.label else DataPlacement(node_id=self.node_id)


class PlacementRequest(BaseModel):
    """Where a database should live, asked when it is first used."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    db_path: str = Field(min_length=1)
    """The database (a path on its data node)."""
    node: str | None = Field(default=None, pattern=NODE_NAME_PATTERN)
    """``storage.node``: a named node, if the settings ask for one."""
    resource: str | None = Field(default=None, pattern=NODE_NAME_PATTERN)
    """``storage.node_resource``: a custom resource, if the settings ask for one."""
    agent: AgentNode | None = None
    """The node of the agent asking (the default placement); ``None`` for a job that names a
    database nobody placed yet (it goes to the queue's node)."""

    @model_validator(mode="after")
    def _one_choice(self) -> PlacementRequest:
        if self.node is not None and self.resource is not None:
            raise ValueError("a placement request names a node or a resource, not both")
        return self

    @property
    def explicit(self) -> DataPlacement | None:
        """The placement the settings ask for, if they ask for one."""
        if self.node is not None:
            return DataPlacement(node=self.node)
        if self.resource is not None:
            return DataPlacement(resource=self.resource)
        return None


class PlacementConflictError(ConflictError):
    """The settings ask for another node than the one a database was created on."""

    def __init__(self, db_path: str, recorded: DataPlacement, asked: DataPlacement) -> None:
        self.db_path = db_path
        self.recorded = recorded
        self.asked = asked
        super().__init__(
            f"the memory database {db_path!r} lives on {recorded.describe()}, not {asked.describe()}: "
            "a database stays on the node it was created on (move its files and its record by hand, "
            "or use another storage.database)"
        )

    def __reduce__(self) -> tuple[type[PlacementConflictError], tuple[str, DataPlacement, DataPlacement]]:
        return type(self), (self.db_path, self.recorded, self.asked)  # crosses process boundaries


class DataNodeLostError(OmrayError):
    """No node of the cluster is the data node of a database now: its node is down (or gone)."""

    def __init__(self, db_path: str, placement: DataPlacement) -> None:
        self.db_path = db_path
        self.placement = placement
        super().__init__(
            f"the node holding memory database {db_path!r} ({placement.describe()}) is not in the "
            "cluster; its jobs resume when it returns with the same disk"
        )

    def __reduce__(self) -> tuple[type[DataNodeLostError], tuple[str, DataPlacement]]:
        return type(self), (self.db_path, self.placement)  # crosses process boundaries


def storage_placement(storage: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``storage.node`` and ``storage.node_resource`` of a settings block's ``storage`` section (at
    most one; each a Ray label value); :class:`SettingsError` naming the key otherwise."""
    found: dict[str, str | None] = {}
    for key in ("node", "node_resource"):
        value = storage.get(key)
        if value is not None and not valid_node_name(value):
            shape = "a text that does not match" if isinstance(value, str) else f"a {type(value).__name__}"
            raise SettingsError(
                f"storage.{key} must be a node label or resource name ({NODE_NAME_PATTERN}), got {shape}"
            )
        found[key] = None if value is None else str(value)
    if found["node"] is not None and found["node_resource"] is not None:
        raise SettingsError("storage.node and storage.node_resource are exclusive: set one of them")
    return found["node"], found["node_resource"]
