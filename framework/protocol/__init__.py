"""Sans-I/O codecs: bytes in, values out. No sockets, no trio, no clock."""
