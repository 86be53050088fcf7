"""agents/recurrency"""
