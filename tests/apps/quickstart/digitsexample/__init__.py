"""digitsexample: a Flower / PyTorch app shaped like Flower's quickstart-pytorch."""
