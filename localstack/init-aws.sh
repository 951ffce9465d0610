#!/usr/bin/env bash
# Creates what alance's test suite expects in LocalStack: the S3 bucket `alance-test` and the
# DynamoDB table `alance-commits` (HASH key `base_uri` S, RANGE key `version` N), the layout
# Lance's DynamoDB commit protocol uses.
#
# Runs inside the container as a LocalStack "ready" hook (where `awslocal` exists). It also works
# from the host against a running LocalStack with the AWS CLI:
#   AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 \
#     ENDPOINT=http://127.0.0.1:4566 localstack/init-aws.sh
# Safe to run more than once.
set -euo pipefail

BUCKET="${ALANCE_TEST_S3_BUCKET:-alance-test}"
TABLE="${ALANCE_TEST_DYNAMODB_TABLE:-alance-commits}"
REGION="${AWS_DEFAULT_REGION:-us-east-1}"

if command -v awslocal >/dev/null 2>&1; then
    aws_() { awslocal "$@"; }
else
    aws_() { aws --endpoint-url "${ENDPOINT:-http://127.0.0.1:4566}" --region "$REGION" "$@"; }
fi

if aws_ s3api head-bucket --bucket "$BUCKET" >/dev/null 2>&1; then
    echo "bucket $BUCKET exists"
else
    aws_ s3api create-bucket --bucket "$BUCKET" >/dev/null
    echo "created bucket $BUCKET"
fi

if aws_ dynamodb describe-table --table-name "$TABLE" >/dev/null 2>&1; then
    echo "table $TABLE exists"
else
    aws_ dynamodb create-table \
        --table-name "$TABLE" \
        --attribute-definitions AttributeName=base_uri,AttributeType=S \
                                AttributeName=version,AttributeType=N \
        --key-schema AttributeName=base_uri,KeyType=HASH AttributeName=version,KeyType=RANGE \
        --billing-mode PAY_PER_REQUEST >/dev/null
    aws_ dynamodb wait table-exists --table-name "$TABLE"
    echo "created table $TABLE"
fi
