"""credit"""
