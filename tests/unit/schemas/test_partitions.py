"""Partitions: the servers' mapping that spreads per-node subjects over N partitions by node,
as nats-server configuration and nsc commands, and the subjects streams and consumers take."""

from __future__ import annotations

import pytest

from placewatch.schemas import partitions
from placewatch.schemas.partitions import (
    check,
    consumer_subject,
    mapped,
    mapping,
    nsc_commands,
    partition_of,
    server_config,
    stream_subjects,
)


def test_the_mapping_puts_the_partition_before_the_node_token() -> None:
    # A node's inventory is in its telemetry's partition: a view joins them without the others.
    assert partitions.PARTITIONED == ("telemetry", "inventory")
    assert mapping("placewatch", 4) == {
        "placewatch.telemetry.*": "placewatch.telemetry.{{partition(4,1)}}.{{wildcard(1)}}",
        "placewatch.inventory.*": "placewatch.inventory.{{partition(4,1)}}.{{wildcard(1)}}",
    }
    assert mapping("acme.pw", 16, ("telemetry",)) == {
        "acme.pw.telemetry.*": "acme.pw.telemetry.{{partition(16,1)}}.{{wildcard(1)}}"
    }


def test_another_per_node_kind_is_one_more_name_with_the_same_partitions() -> None:
    assert server_config("placewatch", 4, ("telemetry", "inventory", "health")) == (
        "mappings = {\n"
        '  "placewatch.telemetry.*": "placewatch.telemetry.{{partition(4,1)}}.{{wildcard(1)}}"\n'
        '  "placewatch.inventory.*": "placewatch.inventory.{{partition(4,1)}}.{{wildcard(1)}}"\n'
        '  "placewatch.health.*": "placewatch.health.{{partition(4,1)}}.{{wildcard(1)}}"\n'
        "}\n"
    )


def test_the_nsc_commands_give_the_same_mapping_to_an_account() -> None:
    assert nsc_commands("placewatch", 8, "PLACEWATCH") == (
        "nsc add mapping --account PLACEWATCH --from 'placewatch.telemetry.*' "
        "--to 'placewatch.telemetry.{{partition(8,1)}}.{{wildcard(1)}}'\n"
        "nsc add mapping --account PLACEWATCH --from 'placewatch.inventory.*' "
        "--to 'placewatch.inventory.{{partition(8,1)}}.{{wildcard(1)}}'\n"
    )


def fnv1a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) % (1 << 32)
    return h


def test_a_partition_is_fnv_1a_of_the_node_token_modulo_n() -> None:
    # FNV-1a, 32 bits: the published test values of "a" and "foobar".
    assert partition_of("a", 1 << 32) == 0xE40C292C
    assert partition_of("foobar", 1 << 32) == 0xBF9CF968
    assert partition_of("foobar", 4) == 0xBF9CF968 % 4
    # The token is hashed, as the server sees it: `a.b` travels as `a=2Eb`.
    assert partition_of("a.b", 1 << 32) == fnv1a(b"a=2Eb")
    assert partition_of("a.b", 1 << 32) != partition_of("a_b", 1 << 32)
    assert {partition_of(f"gpu-{i:03d}", 4) for i in range(100)} == {0, 1, 2, 3}
    assert partition_of("anything", 1) == 0


def test_the_mapped_subject_of_a_node() -> None:
    p = partition_of("rack 4.gpu*7", 4)
    assert mapped("telemetry", "rack 4.gpu*7", 4) == f"placewatch.telemetry.{p}.rack=204=2Egpu=2A7"
    assert mapped("telemetry", "gpu-07", 4, "acme.pw").startswith("acme.pw.telemetry.")


def test_streams_take_both_forms_and_consumers_all_or_one_partition() -> None:
    assert stream_subjects("telemetry") == ("placewatch.telemetry.*", "placewatch.telemetry.*.*")
    assert stream_subjects("inventory", "acme.pw") == (
        "acme.pw.inventory.*",
        "acme.pw.inventory.*.*",
    )
    # A kind the mapping does not partition has the published form only.
    assert stream_subjects("health", "acme.pw") == ("acme.pw.health.*",)
    assert consumer_subject("telemetry") == "placewatch.telemetry.>"
    assert consumer_subject("telemetry", "acme.pw", 3) == "acme.pw.telemetry.3.*"
    assert consumer_subject("inventory", "pw", 0) == "pw.inventory.0.*"


@pytest.mark.parametrize(
    ("partition", "count", "message"),
    [
        (
            4,
            4,
            "partition 4 is not one of 4 partitions: give 0 to 3, as the servers' mapping "
            "numbers them (docs/operations.md, Partitions)",
        ),
        (
            -1,
            2,
            "partition -1 is not one of 2 partitions: give 0 to 1, as the servers' mapping "
            "numbers them (docs/operations.md, Partitions)",
        ),
        (
            1,
            1,
            "partition 1 is out of range for 1 partition: give 0, as the servers' mapping "
            "numbers them (docs/operations.md, Partitions)",
        ),
        (
            0,
            0,
            "0 partitions: give the N of the servers' partition mapping, 1 or more "
            "(docs/operations.md, Partitions)",
        ),
    ],
)
def test_a_partition_out_of_range_is_refused_saying_what_to_give(
    partition: int, count: int, message: str
) -> None:
    with pytest.raises(ValueError) as caught:
        check(partition, count)
    assert str(caught.value) == message


def test_a_mapping_of_no_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^0 partitions: give the N"):
        server_config("placewatch", 0)
    with pytest.raises(ValueError, match=r"^0 partitions: give the N"):
        partition_of("gpu-07", 0)


def test_a_node_publishes_its_own_subject_in_either_form() -> None:
    assert partitions.node_subjects("telemetry", "gpu.07") == (
        "placewatch.telemetry.gpu=2E07",
        "placewatch.telemetry.*.gpu=2E07",
    )
