"""Buckets, apart from machines: a store counts and empties a deployment's buckets, and a cloud
picks its store (``Cloud.store``). A store never imports a cloud: what it needs of one (a
session for the Google APIs) is handed to it.

- ``base.Store``: the interface.
- ``s3.S3Store``: S3 (and S3-compatible endpoints), through boto3.
- ``gcs.GcsStore``: Cloud Storage's JSON API.
"""
