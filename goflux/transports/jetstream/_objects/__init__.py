"""The Object store on JetStream: the store, names, infos, chunked reads and writes, watches."""

__all__ = ()
