"""prism.reward"""
