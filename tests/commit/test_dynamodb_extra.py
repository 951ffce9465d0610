"""Without aiobotocore (the ``alance[dynamodb]`` extra), DynamoDB commits are refused with a
message naming the extra; everything else works. Run in a child process whose import system
cannot find aiobotocore."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["aiobotocore"] = None  # as if it were not installed
    import pyarrow as pa
    import alance.sync as al
    from alance.errors import UnsupportedFeatureError
    ds = al.write_dataset(pa.table({"id": [1]}), "memory://no-ddb")
    assert ds.count_rows() == 1
    try:
        al.open_dataset("s3+ddb://bucket/ds?ddbTableName=t", storage_options={
            "aws_access_key_id": "k", "aws_secret_access_key": "s",
            "aws_region": "us-east-1", "aws_endpoint": "http://127.0.0.1:9"})
    except UnsupportedFeatureError as exc:
        print("REFUSED:", exc)
    """)


def test_dynamodb_needs_the_extra() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "REFUSED:" in done.stdout and "pip install 'alance[dynamodb]'" in done.stdout
