print("canopyctl")
