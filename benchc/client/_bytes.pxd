# Small byte helpers shared by the compiled modules (inline: nothing is imported at run time).

cdef inline int hex_value(unsigned char c) noexcept nogil:
    """The value of one hex digit, or -1."""
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1
