# Runs before main.py on the board. Room for a traceback even when the heap is exhausted.
import micropython

micropython.alloc_emergency_exception_buf(100)
