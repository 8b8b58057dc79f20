# SPDX-License-Identifier: GPL-3.0-or-later
"""Uploads with boto3 (the AWS SDK), for tests/remote/remote_storage.py; runs in the PyTorch chroot.

    s3_put.py ENDPOINT BUCKET FOLDER [PREFIX]    create BUCKET, upload every file under FOLDER (keys PREFIX + relative)
                                                 with boto3's upload_file; prints the seconds the uploads took
    s3_put.py ENDPOINT BUCKET --download PREFIX OUT   download every key under PREFIX/ into OUT with boto3's transfer
                                                 manager (download_file, its default concurrency); prints seconds
    s3_put.py ENDPOINT BUCKET --replace KEY      overwrite KEY with other bytes (an object replaced while read)
    s3_put.py ENDPOINT BUCKET --get KEY OUT      download KEY to OUT (what OptScope wrote, for PyTorch to load)
                                                 with boto3's download_file; prints the seconds it took
    s3_put.py ENDPOINT BUCKET --list PREFIX      print the keys under PREFIX, one per line
    s3_put.py ENDPOINT BUCKET --uploads PREFIX   print the keys of multipart uploads under PREFIX not completed or
                                                 aborted, one per line
    s3_put.py ENDPOINT BUCKET --assume-role FILE  create BUCKET, upload FILE, take a role's temporary credentials
                                                 from STS (three requests); prints them as JSON
"""
import os
import sys

import boto3

endpoint, bucket = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                  region_name="us-east-1")
if sys.argv[3] == "--replace":
    s3.put_object(Bucket=bucket, Key=sys.argv[4], Body=b"replaced while being read" * 100)
elif sys.argv[3] == "--get":
    import time
    start = time.monotonic()
    s3.download_file(bucket, sys.argv[4], sys.argv[5])
    print(f"{time.monotonic() - start:.3f}")
elif sys.argv[3] == "--assume-role":
    import json
    s3.create_bucket(Bucket=bucket)
    s3.upload_file(sys.argv[4], bucket, os.path.basename(sys.argv[4]))
    sts = boto3.client("sts", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                       region_name="us-east-1")
    c = sts.assume_role(RoleArn="arn:aws:iam::123456789012:role/reader", RoleSessionName="optscope-test")
    c = c["Credentials"]
    print(json.dumps({"key": c["AccessKeyId"], "secret": c["SecretAccessKey"], "token": c["SessionToken"]}))
elif sys.argv[3] == "--list":
    for o in s3.list_objects_v2(Bucket=bucket, Prefix=sys.argv[4]).get("Contents", []):
        print(o["Key"])
elif sys.argv[3] == "--uploads":
    for u in s3.list_multipart_uploads(Bucket=bucket, Prefix=sys.argv[4]).get("Uploads", []):
        print(u["Key"])
elif sys.argv[3] == "--download":
    import time
    prefix, out = sys.argv[4].rstrip("/") + "/", sys.argv[5]
    start = time.monotonic()
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        for o in page.get("Contents", []):
            dst = os.path.join(out, o["Key"][len(prefix):])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            s3.download_file(bucket, o["Key"], dst)
    print(f"{time.monotonic() - start:.3f}")
else:
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    root = sys.argv[3]
    prefix = sys.argv[4].rstrip("/") + "/" if len(sys.argv) > 4 else ""
    import time
    n = 0
    start = time.monotonic()
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            s3.upload_file(path, bucket, prefix + os.path.relpath(path, root))
            n += 1
    print(f"uploaded {n} files to s3://{bucket} in {time.monotonic() - start:.3f} s")
