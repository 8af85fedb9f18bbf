from servicekit.partitioning import murmur2, partition_for


def test_murmur2_matches_kafka_java_reference_values() -> None:
    # Values from Kafka's UtilsTest.testMurmur2 (Java), which pins the same function.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def test_partition_is_in_range_and_stable() -> None:
    assert all(0 <= partition_for(f"s{i}", 7) < 7 for i in range(1000))
    assert partition_for("sess-1", 8) == partition_for("sess-1", 8)
