class _Matmul:
    allow_tf32 = False


matmul = _Matmul()
