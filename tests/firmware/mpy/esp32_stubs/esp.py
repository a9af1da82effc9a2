def flash_size():
    return 8 * 1024 * 1024
