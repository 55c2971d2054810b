benchmark = False
allow_tf32 = True
