"""Key-Value buckets on JetStream: the bucket, its entries and key rules, watches."""

__all__ = ()
